package containeropts

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/volumes/subpath"
)

// fileKeyValue resolves an env entry's fileKeyRef (EnvFiles, beta and on
// in v1.37): the key's value in an env file in one of the pod's volumes,
// typically an emptyDir an init container wrote. The file is the pod's
// own writing, so it is opened beneath the volume only (no link out of
// it), must be a regular file, and is read line by line. ok is false
// for an optional key that is not there. As upstream's, an empty value
// counts as no value.
func (o *Provider) fileKeyValue(ctx context.Context, pod *v1.Pod, ref *v1.FileKeySelector) (string, bool, error) {
	optional := ref.Optional != nil && *ref.Optional
	host, ok := o.volumes.HostPath(pod.UID, ref.VolumeName)
	if !ok {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	f, err := subpath.OpenFile(host, ref.Path)
	if err != nil {
		return "", false, fmt.Errorf("env file %q in volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	defer f.Close()
	v, err := envFileValue(f, ref.Key)
	if err != nil {
		klog.ErrorS(err, "Failed to parse env file", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", ref.VolumeName, "path", ref.Path)
		return "", false, fmt.Errorf("couldn't parse env file %q in volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	if v == "" {
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q of volume %q", ref.Key, ref.Path, ref.VolumeName)
	}
	return v, true, nil
}

// envFileValue reads an env file, upstream's strict subset of the shell's
// syntax, up to the first assignment of key and returns its value ("" if
// there is none):
//
//	# a comment, and blank lines, anywhere outside a value
//	NAME='value'            always single-quoted, taken literally
//	NAME='two               a value may span lines
//	lines' # a comment      only a comment may follow the closing quote
//	NAME= 'ignored'         a space after = assigns the empty string
//
// Indentation before a name is ignored; a space before = is an error, as
// is a line without =, an unquoted value or an unclosed quote (upstream
// refuses the whole file for one such line).
func envFileValue(r io.Reader, key string) (string, error) {
	sc := bufio.NewScanner(r)
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return sc.Text(), true
	}
	for {
		text, ok := next()
		if !ok {
			return "", sc.Err()
		}
		text = strings.TrimLeft(text, " \t")
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, found := strings.Cut(text, "=")
		switch {
		case !found:
			return "", fmt.Errorf("line %d: no '='", line)
		case strings.TrimRight(name, " \t") == "":
			return "", fmt.Errorf("line %d: no variable name", line)
		case strings.TrimRight(name, " \t") != name:
			return "", fmt.Errorf("line %d: whitespace before '='", line)
		}
		if strings.TrimLeft(value, " \t") != value {
			if name == key {
				return "", nil
			}
			continue
		}
		if !strings.HasPrefix(value, "'") {
			return "", fmt.Errorf("line %d: the value is not in single quotes", line)
		}
		v, err := quoted(value[1:], line, next)
		if err != nil {
			return "", err
		}
		if name == key {
			return v, nil
		}
	}
}

// quoted reads a single-quoted value from rest (what follows the opening
// quote) and, until the closing quote, the lines after it.
func quoted(rest string, start int, next func() (string, bool)) (string, error) {
	var b strings.Builder
	for {
		value, after, closed := strings.Cut(rest, "'")
		b.WriteString(value)
		if closed {
			after = strings.TrimLeft(after, " \t")
			if after != "" && !strings.HasPrefix(after, "#") {
				return "", fmt.Errorf("line %d: more than a comment after the closing quote", start)
			}
			return b.String(), nil
		}
		b.WriteByte('\n')
		var ok bool
		if rest, ok = next(); !ok {
			return "", fmt.Errorf("unclosed single quote from line %d", start)
		}
	}
}
