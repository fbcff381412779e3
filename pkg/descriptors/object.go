package descriptors

import "gopkg.in/yaml.v3"

// object is the table of one kind of YAML mapping: its fields in the order
// the messages list them, which are required, and how each is read into
// the T being built. A field's reader records its own problems and reports
// whether the value was usable.
type object[T any] struct {
	names  []string
	fields []objectField[T]
}

type objectField[T any] struct {
	name     string
	required bool
	read     func(r *reader, f field, p *fieldPath, into T) bool
}

// fieldOf is a field that may be left out.
func fieldOf[T any](name string, read func(r *reader, f field, p *fieldPath, into T) bool) objectField[T] {
	return objectField[T]{name: name, read: read}
}

// requiredField is a field that must be given.
func requiredField[T any](name string, read func(r *reader, f field, p *fieldPath, into T) bool) objectField[T] {
	return objectField[T]{name: name, required: true, read: read}
}

func newObject[T any](fields ...objectField[T]) *object[T] {
	o := &object[T]{fields: fields}
	for _, f := range fields {
		o.names = append(o.names, f.name)
	}
	return o
}

// read reads mapping n into into: unknown, repeated and missing required
// fields are problems, and every known field goes to its reader, in the
// order written. It returns the fields given, appended to buf (the
// caller's, with room for every field), and whether all were usable.
func (o *object[T]) read(r *reader, n *yaml.Node, p *fieldPath, into T, buf []field) ([]field, bool) {
	fields, ok := r.mapping(n, p, o.names, buf)
	if !ok {
		return nil, false
	}
	for _, f := range fields {
		fp := p.field(f.name)
		if !o.byName(f.name).read(r, f, &fp, into) {
			ok = false
		}
	}
	for _, spec := range o.fields {
		if spec.required && !has(fields, spec.name) {
			fp := p.field(spec.name)
			r.errorf(n, &fp, "is required")
			ok = false
		}
	}
	return fields, ok
}

func (o *object[T]) byName(name string) *objectField[T] {
	for i := range o.fields {
		if o.fields[i].name == name {
			return &o.fields[i]
		}
	}
	panic("descriptors: field " + name + " is not in its object") // mapping returns known fields only
}

// has reports whether fields holds the named field.
func has(fields []field, name string) bool {
	return find(fields, name) != nil
}

// find returns the named field, or nil.
func find(fields []field, name string) *field {
	for i := range fields {
		if fields[i].name == name {
			return &fields[i]
		}
	}
	return nil
}
