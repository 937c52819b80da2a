// Command complete reads the upstream Go modules the presets catalog
// (src/policy/presets.yaml) cites, at the versions it pins, and lists every
// finalizer name their code adds, removes or checks. A name the catalog
// neither covers (a component's finalizer) nor leaves out with a reason
// (`leftOut`) fails the check. e2e/presets/check-complete.sh runs it.
//
//	complete CATALOG.json          the check: CATALOG.json is `finalizer-guard policy presets -o json`
//	complete file MODULE@VERSION PATH
//	                               print one file of a module (check-sources.sh
//	                               reads a module whose go directive is newer
//	                               than this Go, which `go mod download` then
//	                               fetches but does not unpack, this way)
//
// Modules are fetched with `go mod download` through the module proxy into
// the Go module cache and read from their zip files: nothing is unpacked,
// nothing is built, no upstream code runs.
//
// Exit status: 0 every name found is covered or left out; 1 a name is
// neither, a module the catalog reads was refused by the module proxy
// without the catalog saying so, or a module could not be read; 2 usage.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
)

// The catalog as `policy presets -o json` prints it: only what the check reads.
type catalog struct {
	Presets []preset `json:"presets"`
}

type preset struct {
	Name       string      `json:"name"`
	Components []component `json:"components"`
	Sources    []source    `json:"sources"`
	LeftOut    []leftOut   `json:"leftOut"`
	RunTime    []runTime   `json:"builtAtRunTime"`
	Read       []readEntry `json:"read"`
}

type runTime struct {
	Site   string `json:"site"`
	Builds string `json:"builds"`
}

type component struct {
	Name       string   `json:"name"`
	Finalizers []string `json:"finalizers"`
}

type source struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Github  string `json:"github"`
	Commit  string `json:"commit"`
}

type leftOut struct {
	Finalizer string `json:"finalizer"`
	Reason    string `json:"reason"`
}

type readEntry struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	// Why the module proxy refuses this module version, when it does.
	Refused string `json:"refused"`
	// Where the names were read instead (a GitHub commit), when refused.
	ReadAt string `json:"readAt"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 3 && args[0] == "file":
		return printFile(args[1], args[2], stdout, stderr)
	case len(args) == 1:
		return check(args[0], stdout, stderr)
	default:
		fmt.Fprintln(stderr, "usage: complete CATALOG.json | complete file MODULE@VERSION PATH")
		return 2
	}
}

// A module version as `go mod download -json` reports it.
type download struct {
	Zip   string
	Error string
}

// fetch downloads module@version into the module cache and returns its zip
// file, or why it could not be had. A module whose go directive is newer than
// this Go is fetched and verified, but not unpacked: its zip is read.
func fetch(at string) (string, string) {
	scratch, err := os.MkdirTemp("", "presets-complete-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(scratch)
	// Outside any module: `go mod download MODULE@VERSION` changes nothing.
	cmd := exec.Command("go", "mod", "download", "-json", at)
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
	out, _ := cmd.Output()
	var d download
	if err := json.Unmarshal(out, &d); err != nil {
		return "", fmt.Sprintf("go mod download -json %s printed no report: %v", at, err)
	}
	if d.Zip != "" {
		if _, err := os.Stat(d.Zip); err == nil {
			return d.Zip, ""
		}
	}
	if d.Error == "" {
		d.Error = "no zip file"
	}
	return "", d.Error
}

func printFile(at, file string, stdout, stderr io.Writer) int {
	zipPath, refusal := fetch(at)
	if zipPath == "" {
		fmt.Fprintf(stderr, "%s could not be downloaded through the module proxy: %s\n", at, refusal)
		return 3
	}
	body, err := readZipFile(zipPath, at, file)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", at, err)
		return 1
	}
	_, _ = stdout.Write(body)
	return 0
}

// The check.
func check(catalogPath string, stdout, stderr io.Writer) int {
	raw, err := os.ReadFile(catalogPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var c catalog
	if err := json.Unmarshal(raw, &c); err != nil {
		fmt.Fprintf(stderr, "%s: not the JSON of `policy presets -o json`: %v\n", catalogPath, err)
		return 2
	}
	failed := false
	var refusedAll []string
	unexplained := 0
	covered, left, names := 0, 0, 0
	for _, p := range c.Presets {
		r := checkPreset(p, stdout)
		refusedAll = append(refusedAll, r.refused...)
		if r.failed {
			failed = true
		}
		unexplained += r.unexplained
		covered += r.covered
		left += r.left
		names += r.names
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "presets complete: %d finalizer name(s) found in %d preset(s): %d covered, %d left out with a reason; %d unexplained (names and sites)\n",
		names, len(c.Presets), covered, left, unexplained)
	if len(refusedAll) > 0 {
		fmt.Fprintf(stdout, "presets complete: %d module version(s) not read here (the module proxy refuses them, or the catalog cites them from GitHub):\n", len(refusedAll))
		for _, r := range refusedAll {
			fmt.Fprintf(stdout, "  %s\n", r)
		}
	}
	if failed || unexplained > 0 {
		fmt.Fprintln(stdout, "presets complete: FAIL: every name and site marked UNEXPLAINED or REFUSED above needs the catalog's word (src/policy/presets.yaml)")
		return 1
	}
	fmt.Fprintln(stdout, "presets complete: ok")
	return 0
}

type presetResult struct {
	failed                            bool
	refused                           []string
	unexplained, covered, left, names int
}

// moduleRef is one module version a preset reads.
type moduleRef struct {
	module, version string
	refused, readAt string // declared by the catalog
}

func (m moduleRef) at() string { return m.module + "@" + m.version }

func checkPreset(p preset, out io.Writer) presetResult {
	var res presetResult
	fmt.Fprintf(out, "\n== %s\n", p.Name)
	var mods []moduleRef
	seen := map[string]bool{}
	for _, s := range p.Sources {
		if s.Module == "" {
			continue
		}
		m := moduleRef{module: s.Module, version: s.Version}
		if !seen[m.at()] {
			seen[m.at()] = true
			mods = append(mods, m)
		}
	}
	for _, r := range p.Read {
		m := moduleRef{module: r.Module, version: r.Version, refused: r.Refused, readAt: r.ReadAt}
		if !seen[m.at()] {
			seen[m.at()] = true
			mods = append(mods, m)
		}
	}
	for _, s := range p.Sources {
		if s.Github != "" {
			at := "github.com/" + s.Github + "@" + shortCommit(s.Commit)
			if !seen[at] {
				seen[at] = true
				fmt.Fprintf(out, "  not read here: %s (the catalog reads it from GitHub: the module proxy refuses the module)\n", at)
				res.refused = append(res.refused, p.Name+": "+at+" (cited from GitHub)")
			}
		}
	}
	idx := newIndex()
	for _, m := range mods {
		zipPath, refusal := fetch(m.at())
		switch {
		case zipPath == "" && m.refused != "":
			fmt.Fprintf(out, "  module %s: REFUSED by the module proxy, as the catalog says (%s)", m.at(), m.refused)
			if m.readAt != "" {
				fmt.Fprintf(out, "; read by hand at %s", m.readAt)
			}
			fmt.Fprintln(out)
			res.refused = append(res.refused, p.Name+": "+m.at()+": "+firstLine(refusal))
			continue
		case zipPath == "":
			fmt.Fprintf(out, "  module %s: REFUSED by the module proxy, and the catalog does not say so: %s\n", m.at(), firstLine(refusal))
			res.refused = append(res.refused, p.Name+": "+m.at()+": "+firstLine(refusal)+" (unexpected)")
			res.failed = true
			continue
		case m.refused != "":
			fmt.Fprintf(out, "  module %s: served now, though the catalog says the proxy refuses it: read\n", m.at())
		}
		st, err := idx.addModule(zipPath, m.module, m.version)
		if err != nil {
			fmt.Fprintf(out, "  module %s: FAIL: %v\n", m.at(), err)
			res.failed = true
			continue
		}
		fmt.Fprintf(out, "  module %s: %d Go files read", m.at(), st.files)
		if st.unparsed > 0 {
			fmt.Fprintf(out, " (%d did not parse)", st.unparsed)
		}
		fmt.Fprintln(out)
	}
	found, runtime := idx.names()
	var ordered []string
	for n := range found {
		ordered = append(ordered, n)
	}
	sort.Strings(ordered)
	var coveredLines, leftLines, badLines []string
	for _, name := range ordered {
		where := describeSites(found[name])
		if comp := coveringComponent(p, name); comp != "" {
			coveredLines = append(coveredLines, fmt.Sprintf("    %s  [%s]  %s", name, comp, where))
			res.covered++
		} else if reason := leftOutReason(p, name); reason != "" {
			leftLines = append(leftLines, fmt.Sprintf("    %s  -- %s  %s", name, reason, where))
			res.left++
		} else {
			badLines = append(badLines, fmt.Sprintf("    %s  %s", name, where))
			res.unexplained++
		}
	}
	res.names = len(ordered)
	fmt.Fprintf(out, "  names found: %d\n", len(ordered))
	printBlock(out, "  covered:", coveredLines)
	printBlock(out, "  left out, with the catalog's reason:", leftLines)
	printBlock(out, "  UNEXPLAINED (neither covered nor left out in src/policy/presets.yaml):", badLines)
	for _, l := range p.LeftOut {
		if !anyMatches(l.Finalizer, ordered) && len(mods) > len(res.refused) {
			fmt.Fprintf(out, "  note: left out %s is no longer found in the modules read\n", l.Finalizer)
		}
	}
	var explained, unexplainedSites, keys []string
	seenKey := map[string][]siteRef{}
	for _, rt := range runtime {
		if _, ok := seenKey[rt.Key]; !ok {
			keys = append(keys, rt.Key)
		}
		seenKey[rt.Key] = append(seenKey[rt.Key], rt.Where)
	}
	for _, key := range keys {
		where := describeSites(seenKey[key])
		if builds := runTimeReason(p, key); builds != "" {
			explained = append(explained, fmt.Sprintf("    %s  -- %s  %s", key, builds, where))
		} else {
			unexplainedSites = append(unexplainedSites, fmt.Sprintf("    %s  %s", key, where))
			res.unexplained++
		}
	}
	printBlock(out, "  finalizers held in a variable, with what the catalog says reaches them:", explained)
	printBlock(out, "  UNEXPLAINED finalizers held in a variable (add the site to builtAtRunTime, with what reaches it):", unexplainedSites)
	for _, rt := range p.RunTime {
		if _, ok := seenKey[rt.Site]; !ok && len(mods) > len(res.refused) {
			fmt.Fprintf(out, "  note: builtAtRunTime %s is no longer found in the modules read\n", rt.Site)
		}
	}
	return res
}

func printBlock(out io.Writer, title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(out, title)
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}

func matches(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

func anyMatches(pattern string, names []string) bool {
	for _, n := range names {
		if matches(pattern, n) {
			return true
		}
	}
	return false
}

func coveringComponent(p preset, name string) string {
	var comps []string
	for _, c := range p.Components {
		for _, f := range c.Finalizers {
			if matches(f, name) {
				comps = append(comps, "preset:"+p.Name+"/"+c.Name)
				break
			}
		}
	}
	return strings.Join(comps, ", ")
}

func runTimeReason(p preset, key string) string {
	for _, r := range p.RunTime {
		if r.Site == key {
			return r.Builds
		}
	}
	return ""
}

func leftOutReason(p preset, name string) string {
	for _, l := range p.LeftOut {
		if matches(l.Finalizer, name) {
			return l.Reason
		}
	}
	return ""
}

func describeSites(sites []siteRef) string {
	var parts []string
	for i, s := range sites {
		if i == 2 {
			parts = append(parts, fmt.Sprintf("and %d more", len(sites)-2))
			break
		}
		parts = append(parts, s.String())
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// localName is the name a file uses for an import without an alias: the
// package's own name when it was read, else the path's last element that is
// not a major version suffix.
func defaultImportName(importPath string, pkgNames map[string]string) string {
	if n, ok := pkgNames[importPath]; ok {
		return n
	}
	base := path.Base(importPath)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		base = path.Base(path.Dir(importPath))
	}
	return strings.ReplaceAll(base, "-", "_")
}
