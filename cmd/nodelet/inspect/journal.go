package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/pkg/infra/kubeletconfig"
	"github.com/nodelet/nodelet/pkg/node/journal"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// JournalCommand is `nodelet journal inspect [--root-dir DIR] [-o text|json]`:
// it prints the node journal (see docs/design.md) without changing it,
// reading a copy while nodelet holds the file. Secrets and tokens are
// named, never printed.
func JournalCommand(args []string, out io.Writer) error {
	usage := "usage: nodelet journal inspect [--root-dir DIR] [-o text|json]"
	if len(args) == 0 || args[0] != "inspect" {
		return fmt.Errorf("journal: want the inspect subcommand\n%s", usage)
	}
	fs := pflag.NewFlagSet("nodelet journal inspect", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rootDir := fs.String("root-dir", kubeletconfig.DefaultRootDir, "nodelet's root directory, which holds "+journal.File)
	output := fs.StringP("output", "o", "text", "text or json")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
		return fmt.Errorf("journal inspect: bad arguments (%v)\n%s\n%s", err, usage, fs.FlagUsages())
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("journal inspect: output %q: want text or json", *output)
	}
	path := filepath.Join(*rootDir, journal.File)
	state, copied, err := journal.Inspect(path)
	if err != nil {
		return fmt.Errorf("journal inspect: %s: %w", path, err)
	}
	if *output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(state)
	}
	printJournal(out, path, copied, state)
	return nil
}

func printJournal(out io.Writer, path string, copied bool, s *journal.State) {
	note := ""
	if copied {
		note = ", read from a copy: nodelet holds it"
	}
	fmt.Fprintf(out, "Node journal %s (%d bytes%s)\n\n", path, s.Size, note)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "PODS (%d)\nNAMESPACE/NAME\tUID\tSOURCE\tADMISSION\tPHASE\tFINISHED\tMIRROR OF\n", len(s.Pods))
	for _, p := range s.Pods {
		name, mirrorOf := "?", ""
		if p.Pod != nil {
			name = p.Pod.Namespace + "/" + p.Pod.Name
			mirrorOf = p.Pod.Annotations[podutil.ConfigMirrorAnnotationKey]
		}
		admission, phase, finished := "-", "-", "-"
		if d := p.Decision; d != nil {
			admission = "admitted"
			if !d.Admitted {
				admission = "rejected: " + d.Reason
			}
		}
		if st := p.Status; st != nil {
			phase, finished = string(st.Status.Phase), fmt.Sprint(st.Finished)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, p.UID, p.Source, admission, phase, finished, mirrorOf)
	}
	fmt.Fprintf(w, "\nOBJECTS (%d)\n", len(s.Objects))
	for _, o := range s.Objects {
		fmt.Fprintln(w, o)
	}
	fmt.Fprintf(w, "\nTOKENS (%d)\nNAMESPACE/SERVICEACCOUNT\tPOD\tEXPIRES\n", len(s.Tokens))
	for _, t := range s.Tokens {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\n", t.Namespace, t.ServiceAccount, t.Pod, t.Expires.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "\nTIMELINES OF FINISHED PODS (%d)\nNAMESPACE/NAME\tUID\tSTEPS\n", len(s.Timelines))
	for _, t := range s.Timelines {
		fmt.Fprintf(w, "%s/%s\t%s\t%d\n", t.Namespace, t.Name, t.UID, len(t.Steps))
	}
	fmt.Fprintf(w, "\nDAMAGED RECORDS, SKIPPED (%d)\n", len(s.Damaged))
	for _, d := range s.Damaged {
		fmt.Fprintln(w, d)
	}
	w.Flush()
}
