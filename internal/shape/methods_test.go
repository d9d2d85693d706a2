// Package shape holds tests of the code's shape: figures that
// docs/design.md states, kept true by a test rather than by review.
package shape

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxMethods is the most methods a type in pkg/ may have: past it, a type
// is a hub to split (docs/design.md, "Packages and their interfaces").
const maxMethods = 25

// methodCounts counts the methods declared on each named type under root
// (test files excluded), keyed by "package-dir.Type".
func methodCounts(t *testing.T, root string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			counts[rel+"."+receiverType(fn.Recv.List[0].Type)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}

// TestNoTypeHasMoreThan25Methods names every type in pkg/ past the limit.
func TestNoTypeHasMoreThan25Methods(t *testing.T) {
	counts := methodCounts(t, "../../pkg")
	if len(counts) < 100 {
		t.Fatalf("found methods on %d types only: is ../../pkg the product tree?", len(counts))
	}
	var over []string
	for typ, n := range counts {
		if n > maxMethods {
			over = append(over, fmt.Sprintf("%s: %d methods", typ, n))
		}
	}
	sort.Strings(over)
	if len(over) > 0 {
		t.Errorf("types past %d methods (split them):\n%s", maxMethods, strings.Join(over, "\n"))
	}
}

// The counter counts what it should: a pointer and a value receiver, a
// generic type's, and not a function without a receiver.
func TestMethodCounts(t *testing.T) {
	dir := t.TempDir()
	src := `package p
type A struct{}
func (A) One() {}
func (*A) Two() {}
type G[T any] struct{}
func (g *G[T]) Three() {}
func Free() {}
`
	if err := writeFile(filepath.Join(dir, "p", "p.go"), src); err != nil {
		t.Fatal(err)
	}
	got := methodCounts(t, dir)
	if got["p.A"] != 2 || got["p.G"] != 1 || len(got) != 2 {
		t.Fatalf("counts %v", got)
	}
}

// maxRootLines bounds the composition root: it wires, and node policy,
// flag parsing and the inspection commands live elsewhere.
const maxRootLines = 1600

// TestTheCompositionRootOnlyWires counts cmd/nodelet/app's lines (test
// files excluded).
func TestTheCompositionRootOnlyWires(t *testing.T) {
	entries, err := os.ReadDir("../../cmd/nodelet/app")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("../../cmd/nodelet/app", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines < 500 {
		t.Fatalf("cmd/nodelet/app has %d lines: is it the composition root?", lines)
	}
	if lines >= maxRootLines {
		t.Errorf("cmd/nodelet/app has %d lines, at most %d: move what is not wiring to the package of its concern", lines, maxRootLines-1)
	}
}
