package source

import "fmt"

// Problem is one manifest that could not be used: a file that does not
// read or split, a document that does not parse, an object that fails
// decoding or validation, or an object defined twice. A file at fault keeps
// its last good content; an object at fault keeps its last good version.
type Problem struct {
	File   string // path as Dir joined with the file name
	Doc    int    // 1-based YAML document number; 0 when the whole file is at fault
	Object string // "Service default/web"; empty when the document did not decode
	Err    error
	// Kept says the object's last good version stays in force; false for
	// an object never read good, which is not served.
	Kept bool
}

func (p Problem) Error() string {
	s := p.File
	if p.Doc > 0 {
		s += fmt.Sprintf(": document %d", p.Doc)
	}
	if p.Object != "" {
		s += " (" + cut(p.Object) + ")"
	}
	return s + ": " + p.Err.Error()
}

func (p Problem) Unwrap() error { return p.Err }

// cut shortens a name for a message: an object may be named with a
// megabyte, which the validation refuses but the report must not repeat.
func cut(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:max], len(s))
}
