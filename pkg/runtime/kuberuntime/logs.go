package kuberuntime

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strings"
)

// Limits on termination messages, as upstream sets them, so a chatty
// container cannot bloat its pod's status.
const (
	maxTerminationMessageBytes    = 4 * 1024
	maxTerminationMessageLogBytes = 2 * 1024
	maxTerminationMessageLines    = 80
)

// readTail reads at most max bytes from the end of a file.
func readTail(path string, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, max))
	return string(b), err
}

// tailLogMessage returns the last lines of a CRI-format log file
// ("<time> <stream> <P|F> <text>"), joined back into the container's own
// output, a last line without a newline included.
func tailLogMessage(path string, lines int, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var tail []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var partial strings.Builder
	for sc.Scan() {
		text, full, ok := parseCRILogLine(sc.Bytes())
		if !ok {
			continue
		}
		partial.Write(text)
		if !full {
			continue
		}
		tail = append(tail, partial.String())
		partial.Reset()
		if len(tail) > lines {
			tail = tail[1:]
		}
	}
	msg := strings.Join(tail, "\n")
	if len(tail) > 0 {
		msg += "\n"
	}
	if partial.Len() > 0 {
		// The container's last output had no newline (echo -n): the
		// runtime wrote it as a partial line, and it is the message's end.
		if len(tail) == lines {
			msg = msg[len(tail[0])+1:]
		}
		msg += partial.String()
	}
	if int64(len(msg)) > max {
		msg = msg[int64(len(msg))-max:]
	}
	return msg, sc.Err()
}

// parseCRILogLine splits one CRI log line into its text and whether the
// text ends a line (F) or continues on the next (P).
func parseCRILogLine(line []byte) (text []byte, full, ok bool) {
	fields := bytes.SplitN(line, []byte(" "), 4)
	if len(fields) < 3 {
		return nil, false, false
	}
	if len(fields) == 4 {
		text = fields[3]
	}
	return text, string(fields[2]) == "F", true
}
