// Renders keadmCmd templates with Go's own text/template, for tests/template_go.rs.
//
// Reads {"data": {...}, "env": {...}, "templates": [...]} as JSON on stdin and writes one
// JSON object per template: "keadm", as keadm renders it (a map[string]string, default
// options, no functions of its own), and "additions", with keadm-batch's documented
// additions: missingkey=error, `env` reading the given environment, and a function per
// cmdTplArgs key that is an identifier (the `{{key}}` form). Outputs are hex, so the
// comparison is byte for byte even where Go writes bytes that are not UTF-8.
// Standard library only: it builds offline.
package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"text/template"
	"unicode"
)

type input struct {
	Data      map[string]string `json:"data"`
	Env       map[string]string `json:"env"`
	Templates []string          `json:"templates"`
}

type result struct {
	Ok     bool   `json:"ok"`
	OutHex string `json:"out_hex"`
	Err    string `json:"err"`
}

type output struct {
	Keadm     result `json:"keadm"`
	Additions result `json:"additions"`
}

// The functions text/template predefines: a key with one of these names stays `{{.key}}`.
var builtins = map[string]bool{
	"and": true, "call": true, "html": true, "index": true, "slice": true, "js": true,
	"len": true, "not": true, "or": true, "print": true, "printf": true, "println": true,
	"urlquery": true, "eq": true, "ge": true, "gt": true, "le": true, "lt": true, "ne": true,
}

func isIdentifier(s string) bool {
	for i, r := range s {
		if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return s != ""
}

func render(t *template.Template, text string, data map[string]string) (res result) {
	// A panic inside text/template is a result too (an error), not a crash of the corpus.
	defer func() {
		if p := recover(); p != nil {
			res = result{Err: fmt.Sprintf("panic: %v", p)}
		}
	}()
	parsed, err := t.Parse(text)
	if err != nil {
		return result{Err: "parse: " + err.Error()}
	}
	var buf bytes.Buffer
	if err := parsed.Execute(&buf, data); err != nil {
		return result{Err: "exec: " + err.Error()}
	}
	return result{Ok: true, OutHex: hex.EncodeToString(buf.Bytes())}
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "render.go: bad input:", err)
		os.Exit(2)
	}
	funcs := template.FuncMap{
		"env": func(name string) (string, error) {
			value, ok := in.Env[name]
			if !ok {
				return "", fmt.Errorf("%s is not set", name)
			}
			return value, nil
		},
	}
	for key, value := range in.Data {
		if isIdentifier(key) && !builtins[key] && key != "env" {
			value := value
			funcs[key] = func() string { return value }
		}
	}
	out := make([]output, 0, len(in.Templates))
	for _, text := range in.Templates {
		out = append(out, output{
			Keadm:     render(template.New("keadmCmd"), text, in.Data),
			Additions: render(template.New("keadmCmd").Option("missingkey=error").Funcs(funcs), text, in.Data),
		})
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "render.go:", err)
		os.Exit(2)
	}
}
