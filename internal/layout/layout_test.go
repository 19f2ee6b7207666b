package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the module's root, from this package's directory.
const root = "../.."

// goFiles parses the non-test, non-generated Go files of dir.
func goFiles(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") || strings.HasSuffix(n, "_templ.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("%s: no Go files (moved? update this test)", dir)
	}
	return fset, files
}

// shortFuncs are the packages whose functions must read as steps: none
// over maxLines lines from its signature to its closing brace.
var shortFuncs = []string{"internal/store", "internal/holds", "internal/live", "internal/ingest", "internal/collector", "internal/tune", "internal/quorum"}

const maxLines = 60

func TestFunctionsAreShort(t *testing.T) {
	for _, dir := range shortFuncs {
		fset, files := goFiles(t, dir)
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				from, to := fset.Position(fd.Pos()), fset.Position(fd.End())
				if n := to.Line - from.Line + 1; n > maxLines {
					t.Errorf("%s:%d: %s is %d lines (at most %d: split it into steps)", from.Filename, from.Line, fd.Name.Name, n, maxLines)
				}
			}
		}
	}
}

// deps lists, for a package, module packages it must not depend on
// (directly or not).
var deps = map[string][]string{
	"internal/holds":  {"internal/collector", "internal/ingest", "internal/live", "internal/web"},
	"internal/store":  {"internal/collector", "internal/ingest", "internal/live", "internal/holds", "internal/web"},
	"internal/live":   {"internal/collector", "internal/ingest", "internal/holds", "internal/web"},
	"internal/ingest": {"internal/collector", "internal/web"},
	"internal/tune":   {"internal/store", "internal/collector", "internal/ingest", "internal/live", "internal/web"},
	// The quorum advisor reads live state and acts through holds, both
	// by interfaces of its own.
	"internal/quorum": {"internal/store", "internal/collector", "internal/ingest", "internal/live", "internal/holds", "internal/web"},
}

func TestPackagesDependOnlyOnWhatTheirRoomAllows(t *testing.T) {
	const mod = "github.com/cbdash/cbdash/"
	for pkg, banned := range deps {
		if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			t.Errorf("%s: %v", pkg, err)
			continue
		}
		out, err := exec.Command("go", "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		have := map[string]bool{}
		for _, l := range strings.Fields(string(out)) {
			have[l] = true
		}
		for _, b := range banned {
			if have[mod+b] {
				t.Errorf("%s depends on %s", pkg, b)
			}
		}
	}
}

// TestWebFindsNoServiceByTypeAssertion: a type assertion to an interface
// declared in internal/web (a service the server needs) would turn a
// wiring mistake into a silent 404; each service is a field of
// web.Config instead.
func TestWebFindsNoServiceByTypeAssertion(t *testing.T) {
	fset, files := goFiles(t, "internal/web")
	ifaces := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if _, ok := ts.Type.(*ast.InterfaceType); ok {
					ifaces[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ta, ok := n.(*ast.TypeAssertExpr)
			if !ok || ta.Type == nil {
				return true
			}
			if id, ok := ta.Type.(*ast.Ident); ok && ifaces[id.Name] {
				t.Errorf("%s: type assertion to web.%s: make it a typed field of web.Config", fset.Position(ta.Pos()), id.Name)
			}
			return true
		})
	}
}
