package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteSize is a flag of a size in bytes: a whole number with an optional
// unit, binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB), as in
// "256MiB"; a bare number is bytes.
type byteSize int64

var byteUnits = []struct {
	suffix string
	factor int64
}{
	// Longest first, so that "MiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

func (b *byteSize) Set(s string) error {
	num, factor := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a size: want a whole number of bytes, or one with a unit such as 64MiB or 1GB", s)
	}
	if n > math.MaxInt64/factor {
		return fmt.Errorf("%q is too large", s)
	}
	*b = byteSize(n * factor)
	return nil
}

// String gives the size in the largest binary unit that divides it.
func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		factor int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.factor == 0 {
			return strconv.FormatInt(n/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// optionalBool is a boolean flag that also knows whether it was set, for
// defaults that depend on other flags (-http-json).
type optionalBool struct {
	value, set bool
}

func (o *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q: want true or false", s)
	}
	o.value, o.set = v, true
	return nil
}

func (o *optionalBool) String() string {
	if o == nil || !o.set {
		return "auto"
	}
	return strconv.FormatBool(o.value)
}

// IsBoolFlag lets "-http-json" alone mean true, as for flag.Bool.
func (o *optionalBool) IsBoolFlag() bool { return true }

// or returns the value if it was set, else def.
func (o optionalBool) or(def bool) bool {
	if o.set {
		return o.value
	}
	return def
}

// choice is a flag whose value is one of a few names, each standing for a
// typed value: the name is parsed once, and the rest of the command
// compares values, not strings.
type choice[T comparable] struct {
	value   T
	options []option[T]
}

type option[T comparable] struct {
	name  string
	value T
}

func (c *choice[T]) Set(s string) error {
	for _, o := range c.options {
		if o.name == s {
			c.value = o.value
			return nil
		}
	}
	return fmt.Errorf("want %s", c.names())
}

func (c *choice[T]) String() string {
	if c == nil {
		return ""
	}
	for _, o := range c.options {
		if o.value == c.value {
			return o.name
		}
	}
	return ""
}

// names lists the choices as "a, b or c".
func (c *choice[T]) names() string {
	var b strings.Builder
	for i, o := range c.options {
		switch {
		case i == 0:
		case i == len(c.options)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(o.name)
	}
	return b.String()
}
