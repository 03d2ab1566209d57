// Package notebook writes a session's history (core/session) as a Jupyter
// notebook in nbformat 4.5: one code cell per executed cell, its outputs
// the notebook's own (streams, the result as execute_result, images as
// display_data, the error), so that Jupyter, nbconvert or a reviewer opens
// it as the kernel would have written it. It is pure: no I/O.
package notebook

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/session"
)

// MIMEType is the media type of a .ipynb file.
const MIMEType = "application/x-ipynb+json"

// Info is what the notebook says of the session it comes from.
type Info struct {
	SessionID       string
	Language        string // the language id: "python", "r"
	LanguageName    string // how it is written: "Python", "R"
	LanguageVersion string // "3.11.2"; "" if unknown
	Exported        time.Time
	// The history's bounds, named in the notice of dropped cells.
	MaxCells int
	MaxBytes string
}

// Kernelspec names the Jupyter kernel that runs a notebook.
type Kernelspec struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	Language    string `json:"language"`
}

// kernel is how Jupyter names a language's kernel and describes the
// language: the kernelspecs ipykernel and IRkernel install, and the
// language_info their kernel_info_reply gives.
type kernel struct {
	spec Kernelspec
	info map[string]any
}

// kernels are the kernels of the languages whose Jupyter names are known.
// Another language gets a kernelspec named after its id (a Jupyter kernel
// of that name may then run it).
var kernels = map[string]kernel{
	"python": {Kernelspec{"python3", "Python 3 (ipykernel)", "python"}, map[string]any{
		"name": "python", "mimetype": "text/x-python", "file_extension": ".py", "pygments_lexer": "ipython3",
		"codemirror_mode": map[string]any{"name": "ipython", "version": 3}, "nbconvert_exporter": "python"}},
	"r": {Kernelspec{"ir", "R", "R"}, map[string]any{
		"name": "R", "mimetype": "text/x-r-source", "file_extension": ".r", "pygments_lexer": "r", "codemirror_mode": "r"}},
}

func kernelFor(in Info) (Kernelspec, map[string]any) {
	k, ok := kernels[in.Language]
	info := map[string]any{}
	if ok {
		for key, v := range k.info {
			info[key] = v
		}
	} else {
		name := in.LanguageName
		if name == "" {
			name = in.Language
		}
		k.spec = Kernelspec{Name: in.Language, DisplayName: name, Language: in.Language}
		info["name"] = in.Language
	}
	if in.LanguageVersion != "" {
		info["version"] = in.LanguageVersion
	}
	return k.spec, info
}

// Notebook is an nbformat 4.5 notebook.
type Notebook struct {
	Cells         []Cell         `json:"cells"`
	Metadata      map[string]any `json:"metadata"`
	NBFormat      int            `json:"nbformat"`
	NBFormatMinor int            `json:"nbformat_minor"`
}

// Cell is a code or markdown cell. ExecutionCount and Outputs belong to
// code cells only (nbformat forbids them on markdown cells).
type Cell struct {
	ID             string         `json:"id"`
	CellType       string         `json:"cell_type"`
	Metadata       map[string]any `json:"metadata"`
	Source         []string       `json:"source"`
	ExecutionCount *int           `json:"execution_count,omitempty"`
	Outputs        []Output       `json:"outputs,omitempty"`
	code           bool
}

// MarshalJSON writes a code cell's execution_count and outputs even when
// they are null and empty, as nbformat requires of code cells.
func (c Cell) MarshalJSON() ([]byte, error) {
	type plain Cell
	if !c.code {
		return marshal(plain(c))
	}
	return marshal(struct {
		ID             string         `json:"id"`
		CellType       string         `json:"cell_type"`
		Metadata       map[string]any `json:"metadata"`
		Source         []string       `json:"source"`
		ExecutionCount *int           `json:"execution_count"`
		Outputs        []Output       `json:"outputs"`
	}{c.ID, c.CellType, c.Metadata, c.Source, c.ExecutionCount, c.Outputs})
}

// Output is one output of a code cell; which fields it has depends on its
// output_type (stream, display_data, execute_result, error).
type Output struct {
	OutputType     string         `json:"output_type"`
	Name           string         `json:"name,omitempty"` // stream: stdout or stderr
	Text           []string       `json:"text,omitempty"` // stream
	Data           map[string]any `json:"data,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	ExecutionCount *int           `json:"execution_count,omitempty"` // execute_result
	EName          string         `json:"ename,omitempty"`           // error
	EValue         *string        `json:"evalue,omitempty"`
	Traceback      []string       `json:"traceback,omitempty"`
}

// MarshalJSON gives display_data and execute_result their (possibly
// empty) metadata and an error its traceback, which nbformat requires.
func (o Output) MarshalJSON() ([]byte, error) {
	type plain Output
	switch o.OutputType {
	case "display_data", "execute_result":
		md := o.Metadata
		if md == nil {
			md = map[string]any{}
		}
		return marshal(struct {
			OutputType     string         `json:"output_type"`
			Data           map[string]any `json:"data"`
			Metadata       map[string]any `json:"metadata"`
			ExecutionCount *int           `json:"execution_count,omitempty"`
		}{o.OutputType, o.Data, md, o.ExecutionCount})
	case "error":
		tb := o.Traceback
		if tb == nil {
			tb = []string{}
		}
		return marshal(struct {
			OutputType string   `json:"output_type"`
			EName      string   `json:"ename"`
			EValue     string   `json:"evalue"`
			Traceback  []string `json:"traceback"`
		}{o.OutputType, o.EName, deref(o.EValue), tb})
	}
	return marshal(plain(o))
}

// marshal is json.Marshal without HTML escapes: a notebook is written as
// Jupyter writes it, "<" as "<", not "\u003c" (six bytes each in an HTML
// output, and unreadable in a diff). The notebook is never embedded in
// HTML by the server.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, v, ""); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encode writes v as JSON without HTML escapes, indented by indent, with
// a final newline.
func encode(b *bytes.Buffer, v any, indent string) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	return enc.Encode(v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Build writes h as a notebook of the session in.
func Build(in Info, h session.History) ([]byte, error) {
	spec, langInfo := kernelFor(in)
	meta := map[string]any{"kernelspec": spec, "language_info": langInfo}
	forge := map[string]any{"session_id": in.SessionID, "cells_dropped": h.Dropped}
	if !in.Exported.IsZero() {
		forge["exported"] = in.Exported.UTC().Format(time.RFC3339)
	}
	meta["mcp_forge"] = forge
	nb := Notebook{Cells: []Cell{}, Metadata: meta, NBFormat: 4, NBFormatMinor: 5}
	if h.Dropped > 0 {
		nb.Cells = append(nb.Cells, Cell{ID: "forge-dropped", CellType: "markdown", Metadata: map[string]any{},
			Source: lines(fmt.Sprintf("*%d executed cell(s) of session `%s` are not in this notebook: a session's history keeps at most %d cells and %s "+
				"(sessions.history_cells, sessions.history_bytes), the oldest dropped first. Re-running it may fail where they defined what later cells use.*",
				h.Dropped, in.SessionID, in.MaxCells, in.MaxBytes))})
	}
	for _, c := range h.Cells {
		nb.Cells = append(nb.Cells, codeCell(c))
	}
	var data bytes.Buffer
	if err := encode(&data, nb, " "); err != nil {
		return nil, fmt.Errorf("notebook of session %q: %w", in.SessionID, err)
	}
	return data.Bytes(), nil
}

func codeCell(c session.Cell) Cell {
	count := c.Count
	cell := Cell{ID: fmt.Sprintf("cell-%d", c.Count), CellType: "code", Source: lines(c.Code), ExecutionCount: &count, Outputs: []Output{}, code: true}
	forge := map[string]any{"success": c.Success, "duration_s": c.Duration.Seconds()}
	cell.Metadata = map[string]any{"mcp_forge": forge}
	if !c.Started.IsZero() {
		// JupyterLab's record of when a cell ran (metadata.execution).
		cell.Metadata["execution"] = map[string]any{
			"iopub.execute_input": c.Started.UTC().Format(time.RFC3339Nano),
			"shell.execute_reply": c.Started.Add(c.Duration).UTC().Format(time.RFC3339Nano),
		}
	}
	if c.OutputsLeft {
		forge["outputs_left_out"] = "the cell's outputs were larger than sessions.history_bytes"
		return cell
	}
	if c.StdoutBytes > int64(len(c.Stdout)) {
		forge["stdout_bytes"] = c.StdoutBytes // the text was cut at execution.max_output
	}
	if c.StderrBytes > int64(len(c.Stderr)) {
		forge["stderr_bytes"] = c.StderrBytes
	}
	stderr := c.Stderr
	if e := c.Error; e != nil && len(e.Traceback) > 0 && stderr == strings.Join(e.Traceback, "\n")+"\n" {
		// A kernel backend that saw no stderr gives the traceback as stderr
		// (sdk/kernel); in a notebook the error output shows it already.
		stderr = ""
	}
	for _, s := range []struct{ name, text string }{{"stdout", c.Stdout}, {"stderr", stderr}} {
		if s.text != "" {
			cell.Outputs = append(cell.Outputs, Output{OutputType: "stream", Name: s.name, Text: lines(s.text)})
		}
	}
	for _, im := range c.Images {
		d := map[string]any{"text/plain": []string{fmt.Sprintf("<%s %s, %d bytes>", im.MIMEType, im.Name, len(im.Data))}}
		if textual(im.MIMEType) {
			d[im.MIMEType] = lines(string(im.Data))
		} else {
			d[im.MIMEType] = base64.StdEncoding.EncodeToString(im.Data)
		}
		cell.Outputs = append(cell.Outputs, Output{OutputType: "display_data", Data: d})
	}
	rich := bundle(c.Rich)
	switch text := c.ResultRepr; {
	case text != "" || c.ResultJSON != "":
		if text == "" {
			text = c.ResultJSON
		}
		rich["text/plain"] = lines(text)
		cell.Outputs = append(cell.Outputs, Output{OutputType: "execute_result", ExecutionCount: &count, Data: rich})
	case len(rich) > 0:
		cell.Outputs = append(cell.Outputs, Output{OutputType: "display_data", Data: rich})
	}
	if e := c.Error; e != nil {
		msg := e.Message
		cell.Outputs = append(cell.Outputs, Output{OutputType: "error", EName: e.Name, EValue: &msg, Traceback: e.Traceback})
	}
	return cell
}

// jsonMIME is nbformat's pattern of MIME types whose data is JSON itself.
var jsonMIME = regexp.MustCompile(`^application/(.*\+)?json$`)

// bundle is rich output as a MIME bundle: JSON types parsed (nbformat
// keeps them as JSON), the others as text lines; JSON that does not parse
// is left out rather than make the notebook invalid.
func bundle(rich map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range rich {
		if jsonMIME.MatchString(k) {
			var x any
			if json.Unmarshal([]byte(v), &x) == nil {
				out[k] = x
			}
			continue
		}
		out[k] = lines(v)
	}
	return out
}

// textual reports whether an image type is text (SVG) rather than bytes
// that a notebook holds in base64.
func textual(mime string) bool { return mime == "image/svg+xml" }

// lines splits text as Jupyter stores multi-line strings: a list of lines,
// each but the last ending with its newline.
func lines(s string) []string {
	if s == "" {
		return []string{}
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}
