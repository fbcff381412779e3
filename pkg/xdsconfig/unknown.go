package xdsconfig

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// UnknownField is a field of a resource that the service's copy of the
// RateLimitConfig message does not have: one a newer xDS server (a newer
// envoyproxy/ratelimit API) sends, which would otherwise be dropped
// without a word.
type UnknownField struct {
	// Resource is the resource's name.
	Resource string
	// Message is the full name of the message that holds it, e.g.
	// ratelimit.config.ratelimit.v3.RateLimitDescriptor.
	Message string
	// Number is the field's number in that message.
	Number int32
	// Path is where the first one was found, e.g. "descriptors[0].rate_limit".
	Path string
}

func (u UnknownField) String() string {
	at := u.Path
	if at == "" {
		at = "the resource"
	}
	return fmt.Sprintf("xds:%s: %s has field %d, which this service does not know (at %s): it is ignored", u.Resource, u.Message, u.Number, at)
}

// unknownFields lists the fields of m, at any depth, that its type does
// not declare, once per message type and field number.
func unknownFields(resource string, m protoreflect.Message) []UnknownField {
	var out []UnknownField
	seen := map[[2]string]bool{}
	var walk func(m protoreflect.Message, path string)
	walk = func(m protoreflect.Message, path string) {
		name := string(m.Descriptor().FullName())
		for b := m.GetUnknown(); len(b) > 0; {
			num, _, n := protowire.ConsumeField(b)
			if n < 0 {
				break // not protobuf: cannot be, the resource decoded
			}
			b = b[n:]
			k := [2]string{name, strconv.Itoa(int(num))}
			if !seen[k] {
				seen[k] = true
				out = append(out, UnknownField{Resource: resource, Message: name, Number: int32(num), Path: path})
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Message() == nil || fd.IsMap() {
				return true
			}
			at := string(fd.Name())
			if path != "" {
				at = path + "." + at
			}
			if fd.IsList() {
				l := v.List()
				for i := range l.Len() {
					walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", at, i))
				}
				return true
			}
			walk(v.Message(), at)
			return true
		})
	}
	walk(m, "")
	return out
}
