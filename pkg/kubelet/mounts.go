package kubelet

import (
	"bufio"
	"os"
	"strings"
)

// mountPoints lists every mount point on the node.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, unescapeMountPath(fields[4]))
		}
	}
	return out, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, ok := octal(s[i+1 : i+4]); ok {
				b.WriteByte(n)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal(s string) (byte, bool) {
	var n int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		n = n*8 + int(c-'0')
	}
	return byte(n), n < 256
}

func hasMountUnder(mounts []string, dir string) bool {
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			return true
		}
	}
	return false
}
