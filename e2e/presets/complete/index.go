package main

import (
	"archive/zip"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Files larger than this are generated code (OpenAPI tables, protobuf): no
// controller logic, and slow to parse.
const maxFileBytes = 2 << 20

// Folders whose code is no controller's: tests, fixtures, vendored copies.
var skippedDirs = map[string]bool{
	"vendor": true, "testdata": true, "test": true, "tests": true, "e2e": true,
	"hack": true, "docs": true, "examples": true, "mocks": true,
}

// A constant or variable that holds the finalizer (by its name).
var finalizerName = regexp.MustCompile(`(?i)finalizer`)

// The calls whose arguments are finalizer names: controller-runtime's
// controllerutil.AddFinalizer / RemoveFinalizer / ContainsFinalizer, and
// the same verbs of each project's own helpers.
var finalizerCall = regexp.MustCompile(`(?i)^(add|remove|contains|has|set|ensure|delete|drop|patch|update|unset)finalizers?$`)

type fileInfo struct {
	pkg     string
	name    string // module@version/path, for reports
	rel     string // the path inside its module
	imports []*ast.ImportSpec
}

type decl struct {
	expr ast.Expr
	file *fileInfo
}

type siteRef struct {
	file *fileInfo
	line int
	how  string
}

func (s siteRef) String() string {
	return fmt.Sprintf("%s:%d %s", s.file.name, s.line, s.how)
}

type site struct {
	siteRef
	expr ast.Expr
	// A value that resolves to no string is reported only when it names a
	// finalizer (a call's argument may be the object).
	reportUnresolved bool
}

type index struct {
	fset     *token.FileSet
	decls    map[string]map[string]decl // package path -> name -> declaration
	pkgNames map[string]string          // package path -> package clause name
	sites    []site
}

func newIndex() *index {
	return &index{
		fset:     token.NewFileSet(),
		decls:    map[string]map[string]decl{},
		pkgNames: map[string]string{},
	}
}

type moduleStats struct{ files, unparsed int }

func readZipFile(zipPath, at, file string) ([]byte, error) {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	want := at + "/" + file
	for _, f := range zr.File {
		if f.Name == want {
			rc, err := f.Open()
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			return io.ReadAll(rc)
		}
	}
	return nil, fmt.Errorf("no file %s in the module", file)
}

func (x *index) addModule(zipPath, module, version string) (moduleStats, error) {
	var st moduleStats
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return st, err
	}
	defer zr.Close()
	prefix := module + "@" + version + "/"
	for _, f := range zr.File {
		rel, ok := strings.CutPrefix(f.Name, prefix)
		if !ok || !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			continue
		}
		if f.UncompressedSize64 > maxFileBytes || skipped(rel) {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return st, err
		}
		src, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return st, err
		}
		dir := ""
		if i := strings.LastIndexByte(rel, '/'); i >= 0 {
			dir = rel[:i]
		}
		pkg := module
		if dir != "" {
			pkg = module + "/" + dir
		}
		st.files++
		if !x.addFile(module+"@"+version+"/"+rel, rel, pkg, src) {
			st.unparsed++
		}
	}
	return st, nil
}

func skipped(rel string) bool {
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		if skippedDirs[p] {
			return true
		}
	}
	return false
}

func (x *index) addFile(name, rel, pkg string, src []byte) bool {
	f, err := parser.ParseFile(x.fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return false
	}
	if strings.HasSuffix(f.Name.Name, "_test") {
		return true
	}
	x.pkgNames[pkg] = f.Name.Name
	fi := &fileInfo{pkg: pkg, name: name, rel: rel, imports: f.Imports}
	if x.decls[pkg] == nil {
		x.decls[pkg] = map[string]decl{}
	}
	addSite := func(e ast.Expr, how string, reportUnresolved bool) {
		x.sites = append(x.sites, site{
			siteRef:          siteRef{file: fi, line: x.fset.Position(e.Pos()).Line, how: how},
			expr:             e,
			reportUnresolved: reportUnresolved,
		})
	}
	// Package-level constants and variables: what a name resolves to.
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					x.decls[pkg][n.Name] = decl{expr: vs.Values[i], file: fi}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if i < len(n.Values) && finalizerName.MatchString(id.Name) && stringish(n.Values[i]) {
					addSite(n.Values[i], "declares "+id.Name, false)
					if _, ok := x.decls[pkg][id.Name]; !ok {
						x.decls[pkg][id.Name] = decl{expr: n.Values[i], file: fi}
					}
				}
			}
		case *ast.CallExpr:
			name := callName(n.Fun)
			switch {
			case name == "append" && len(n.Args) > 1 && mentionsFinalizers(n.Args[0]):
				for _, a := range n.Args[1:] {
					addElems(a, "appended to the finalizers", addSite)
				}
			case finalizerCall.MatchString(name):
				for _, a := range n.Args {
					addElems(a, "passed to "+name, addSite)
				}
			case name == "SetNestedStringSlice" || name == "SetNestedField":
				if hasLiteral(n.Args, "finalizers") {
					for _, a := range n.Args {
						if cl, ok := a.(*ast.CompositeLit); ok {
							for _, e := range cl.Elts {
								addSite(e, "set as metadata.finalizers", true)
							}
						}
					}
				}
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Finalizers" {
				if cl, ok := n.Value.(*ast.CompositeLit); ok {
					for _, e := range cl.Elts {
						addSite(e, "in a Finalizers field", true)
					}
				}
			}
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Finalizers" && i < len(n.Rhs) {
					if cl, ok := n.Rhs[i].(*ast.CompositeLit); ok {
						for _, e := range cl.Elts {
							addSite(e, "assigned to Finalizers", true)
						}
					}
				}
			}
		}
		return true
	})
	return true
}

// addElems records a call's argument: each element of a []string{...}
// literal, or the argument itself. An argument that resolves to no string is
// reported only when its name speaks of a finalizer.
func addElems(a ast.Expr, how string, addSite func(ast.Expr, string, bool)) {
	if cl, ok := a.(*ast.CompositeLit); ok {
		for _, e := range cl.Elts {
			addSite(e, how, true)
		}
		return
	}
	if !stringish(a) {
		return
	}
	addSite(a, how, finalizerName.MatchString(exprText(a)))
}

// stringish: an expression that can be a string constant's value.
func stringish(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return e.Kind == token.STRING
	case *ast.Ident, *ast.SelectorExpr:
		return true
	case *ast.BinaryExpr:
		return e.Op == token.ADD
	case *ast.ParenExpr:
		return stringish(e.X)
	case *ast.CallExpr:
		return len(e.Args) == 1 && (callName(e.Fun) == "string" || isTypeConversion(e.Fun))
	}
	return false
}

func isTypeConversion(fun ast.Expr) bool {
	n := callName(fun)
	return n != "" && n[0] >= 'A' && n[0] <= 'Z' && !finalizerCall.MatchString(n)
}

func callName(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	case *ast.IndexExpr:
		return callName(f.X)
	}
	return ""
}

func mentionsFinalizers(e ast.Expr) bool {
	return strings.Contains(exprText(e), "inalizers")
}

func hasLiteral(args []ast.Expr, want string) bool {
	for _, a := range args {
		if bl, ok := a.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			if s, err := strconv.Unquote(bl.Value); err == nil && s == want {
				return true
			}
		}
	}
	return false
}

// exprText is a short rendering of an expression, for reports.
func exprText(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprText(e.X) + "." + e.Sel.Name
	case *ast.BasicLit:
		return e.Value
	case *ast.CallExpr:
		var args []string
		for _, a := range e.Args {
			args = append(args, exprText(a))
		}
		return exprText(e.Fun) + "(" + strings.Join(args, ", ") + ")"
	case *ast.BinaryExpr:
		return exprText(e.X) + " " + e.Op.String() + " " + exprText(e.Y)
	case *ast.ParenExpr:
		return "(" + exprText(e.X) + ")"
	case *ast.StarExpr:
		return "*" + exprText(e.X)
	case *ast.UnaryExpr:
		return e.Op.String() + exprText(e.X)
	case *ast.IndexExpr:
		return exprText(e.X) + "[" + exprText(e.Index) + "]"
	case *ast.CompositeLit:
		return "{...}"
	}
	return fmt.Sprintf("%T", e)
}

// resolve evaluates a string expression of file fi: literals, constants and
// variables of the packages read, conversions, concatenation.
func (x *index) resolve(e ast.Expr, fi *fileInfo, depth int) (string, bool) {
	if depth > 20 {
		return "", false
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.ParenExpr:
		return x.resolve(e.X, fi, depth+1)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok := x.resolve(e.X, fi, depth+1)
		if !ok {
			return "", false
		}
		b, ok := x.resolve(e.Y, fi, depth+1)
		return a + b, ok
	case *ast.CallExpr:
		if len(e.Args) == 1 && (callName(e.Fun) == "string" || isTypeConversion(e.Fun)) {
			return x.resolve(e.Args[0], fi, depth+1)
		}
	case *ast.Ident:
		if d, ok := x.decls[fi.pkg][e.Name]; ok {
			return x.resolve(d.expr, d.file, depth+1)
		}
	case *ast.SelectorExpr:
		if d, ok := x.declOf(e, fi); ok {
			return x.resolve(d.expr, d.file, depth+1)
		}
		// Var.Field or pkg.Var.Field, Var a composite literal: Field's value
		// in it (Longhorn's finalizer is longhorn.SchemeGroupVersion.Group).
		if d, ok := x.declOf(e.X, fi); ok {
			if cl, ok := d.expr.(*ast.CompositeLit); ok {
				for _, elt := range cl.Elts {
					if kv, ok := elt.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == e.Sel.Name {
							return x.resolve(kv.Value, d.file, depth+1)
						}
					}
				}
			}
		}
	}
	return "", false
}

// declOf finds the declaration a name (NAME, or pkg.NAME of an imported
// package read) refers to.
func (x *index) declOf(e ast.Expr, fi *fileInfo) (decl, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		d, ok := x.decls[fi.pkg][e.Name]
		return d, ok
	case *ast.SelectorExpr:
		pkgIdent, ok := e.X.(*ast.Ident)
		if !ok {
			return decl{}, false
		}
		for _, imp := range fi.imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				continue
			}
			local := defaultImportName(p, x.pkgNames)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			if local == pkgIdent.Name {
				d, ok := x.decls[p][e.Sel.Name]
				return d, ok
			}
		}
	}
	return decl{}, false
}

// plausible: a resolved string that can be a finalizer's name.
func plausible(s string) bool {
	return s != "" && len(s) <= 316 && !strings.ContainsAny(s, " \t\n\"{}%,")
}

// A site whose finalizer is held in a variable: Key is `FILE: EXPRESSION`,
// FILE inside its module, as the catalog's builtAtRunTime names it.
type runtimeSite struct {
	Key   string
	Where siteRef
}

// names resolves every site: the finalizer names found, each with where, and
// the sites whose value is built at run time.
func (x *index) names() (map[string][]siteRef, []runtimeSite) {
	found := map[string][]siteRef{}
	var runtime []runtimeSite
	seenRuntime := map[string]bool{}
	for _, s := range x.sites {
		v, ok := x.resolve(s.expr, s.file, 0)
		if ok && plausible(v) {
			found[v] = append(found[v], s.siteRef)
			continue
		}
		if !ok && s.reportUnresolved {
			line := fmt.Sprintf("%s: %s", s.siteRef, exprText(s.expr))
			if !seenRuntime[line] {
				seenRuntime[line] = true
				runtime = append(runtime, runtimeSite{Key: s.file.rel + ": " + exprText(s.expr), Where: s.siteRef})
			}
		}
	}
	for n := range found {
		sort.SliceStable(found[n], func(i, j int) bool {
			return found[n][i].String() < found[n][j].String()
		})
	}
	sort.SliceStable(runtime, func(i, j int) bool {
		return runtime[i].Where.String() < runtime[j].Where.String()
	})
	return found, runtime
}
