//go:build ignore

// goproxy-debian.go: see goproxy-debian.  Run in GOPATH mode:
//
//	go run goproxy-debian.go GOCODE OUT GO.MOD
package main

import (
	"archive/zip"
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type modver struct{ path, version string }

// requires reads the requirements of a go.mod file's text.
func requires(text string) []modver {
	var out []modver
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "require" && f[1] == "(":
			in = true
		case in && len(f) == 1 && f[0] == ")":
			in = false
		case in && len(f) >= 2:
			out = append(out, modver{strings.Trim(f[0], `"`), f[1]})
		case len(f) >= 3 && f[0] == "require":
			out = append(out, modver{strings.Trim(f[1], `"`), f[2]})
		}
	}
	return out
}

// modulePath is the path a go.mod file's text declares.
func modulePath(text string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// escape is the module proxy's case encoding of a path.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			b.WriteRune(r + 'a' - 'A')
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go run goproxy-debian.go GOCODE OUT GO.MOD")
		os.Exit(2)
	}
	gocode, out, gomod := os.Args[1], os.Args[2], os.Args[3]
	top, err := os.ReadFile(gomod)
	check(err)

	// The module graph, from go.mod's requirements down through each
	// module's go.mod as Debian ships it.  A module Debian does not ship
	// gets a go.mod of its own name only: no build here needs its code.
	seen := map[modver]bool{}
	work := requires(string(top))
	versions := map[string][]string{}
	zipped, stubbed := 0, 0
	for len(work) > 0 {
		mv := work[0]
		work = work[1:]
		if seen[mv] {
			continue
		}
		seen[mv] = true
		dir := filepath.Join(gocode, filepath.FromSlash(mv.path))
		base := filepath.Join(out, escape(mv.path), "@v")
		check(os.MkdirAll(base, 0o755))
		file := filepath.Join(base, escape(mv.version))
		versions[mv.path] = append(versions[mv.path], mv.version)
		check(os.WriteFile(file+".info", []byte(fmt.Sprintf("{\"Version\":%q,\"Time\":\"2022-01-01T00:00:00Z\"}\n", mv.version)), 0o644))
		modText := "module " + mv.path + "\n"
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && modulePath(string(b)) != mv.path {
				// another major version in that directory
				stubbed++
				goto stub
			}
			if err == nil {
				modText = string(b)
				work = append(work, requires(modText)...)
			}
			writeZip(file+".zip", dir, mv, modText)
			zipped++
		} else {
			stubbed++
		}
	stub:
		check(os.WriteFile(file+".mod", []byte(modText), 0o644))
	}
	for path, vs := range versions {
		sort.Strings(vs)
		check(os.WriteFile(filepath.Join(out, escape(path), "@v", "list"), []byte(strings.Join(vs, "\n")+"\n"), 0o644))
	}
	fmt.Printf("goproxy-debian: %d module versions from %s, %d go.mod stubs, in %s\n", zipped, gocode, stubbed, out)
}

// writeZip writes a module zip of dir: its regular files, without the
// directories of nested modules, vendor directories and testdata's
// symbolic links, each under path@version/.
func writeZip(name, dir string, mv modver, modText string) {
	f, err := os.Create(name)
	check(err)
	zw := zip.NewWriter(f)
	prefix := mv.path + "@" + mv.version + "/"
	wroteMod := false
	check(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if rel == "go.mod" {
			wroteMod = true
		}
		w, err := zw.Create(prefix + rel)
		if err != nil {
			return err
		}
		r, err := os.Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	}))
	if !wroteMod {
		w, err := zw.Create(prefix + "go.mod")
		check(err)
		_, err = io.WriteString(w, modText)
		check(err)
	}
	check(zw.Close())
	check(f.Close())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "goproxy-debian:", err)
		os.Exit(1)
	}
}
