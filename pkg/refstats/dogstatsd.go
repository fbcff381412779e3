package refstats

// StatsDOption changes what a StatsD sink sends.
type StatsDOption func(*format)

// WithTags puts tags on every stat, as the reference's EXTRA_TAGS does:
// on a plain StatsD server, appended to the name as ".__key=value" each
// (its stats library's way); with DogStatsD, as tags ("|#key:value").
func WithTags(tags Tags) StatsDOption {
	return func(f *format) { f.tags = tags }
}

// WithDogStatsD sends DogStatsD lines (over UDP, as the reference's
// USE_DOG_STATSD): the tags after '|#', and each name first rewritten by
// the first of mogrifiers that matches it (none: names unchanged).
func WithDogStatsD(mogrifiers Mogrifiers) StatsDOption {
	return func(f *format) { f.dogStatsD, f.mogrifiers = true, mogrifiers }
}

// format writes a stat's line.
type format struct {
	tags       Tags
	dogStatsD  bool
	mogrifiers Mogrifiers
}

// line is "name:value|kind\n", with the tags where the format puts them.
func (f *format) line(name string, value []byte, kind string) []byte {
	if !f.dogStatsD {
		b := f.tags.appendToName([]byte(name))
		return appendValue(b, value, kind)
	}
	name, added := f.mogrifiers.Apply(name)
	b := appendValue([]byte(name), value, kind)
	b = b[:len(b)-1] // the newline, after the tags
	sep := "|#"
	for _, t := range f.tags {
		b = append(append(append(append(b, sep...), t.Key...), ':'), t.Value...)
		sep = ","
	}
	for _, t := range added {
		b = append(append(b, sep...), t...)
		sep = ","
	}
	return append(b, '\n')
}

func appendValue(b, value []byte, kind string) []byte {
	b = append(b, ':')
	b = append(b, value...)
	b = append(b, '|')
	b = append(b, kind...)
	return append(b, '\n')
}
