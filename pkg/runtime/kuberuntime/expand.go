package kuberuntime

import "strings"

// Expand replaces $(VAR) references in s with values from mapping, the way
// the API defines it for command, args and env: $$ escapes a dollar, and a
// reference to an undefined variable (or one that is malformed) is left as
// written.
func Expand(s string, mapping func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := mapping(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// EnvMapping looks names up in a list of environment variables, later
// entries winning as they do in a process environment.
func EnvMapping(envs map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := envs[name]
		return v, ok
	}
}
