package translate

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Annotations and the load-balancer source-ranges annotation are the
// Service fields the API server does not check: any namespace user may
// write up to 256 KiB there. What translation says about them is logged
// and posted as an Event by every node, on every translation, so it is
// kept small: a value is quoted cut, and a list reports its first few
// problems and a count of the rest, not one error per item.

// maxQuoted is how much of a value an error quotes. No valid value of the
// annotations read here is longer (a CIDR is at most 49 bytes).
const maxQuoted = 64

// maxReasons is how many problems of one list an error names.
const maxReasons = 5

// quote quotes s for an error, cut to maxQuoted bytes (on a rune
// boundary) and followed by its length when cut.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	n := maxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:n], len(s))
}

// bounded is err, the error of parsing value, unless value is too long for
// err to quote: the parsers of the standard library quote their input
// whole. Then it says what value should have been, quoting it cut.
func bounded(err error, value, want string) error {
	if err == nil || len(value) <= maxQuoted {
		return err
	}
	return fmt.Errorf("not %s: %s", want, quote(value))
}

// reasons collects a list's problems, keeping the first maxReasons and
// counting the rest.
type reasons struct {
	shown []error
	more  int
}

// over counts one more problem, and tells whether it is past the ones
// shown: then the caller need not format it (formatting 100,000 problems
// to drop them is the cost a hostile list would buy).
func (r *reasons) over() bool {
	if len(r.shown) < maxReasons {
		return false
	}
	r.more++
	return true
}

// add records a problem that is not over.
func (r *reasons) add(format string, args ...any) {
	r.shown = append(r.shown, fmt.Errorf(format, args...))
}

func (r *reasons) err() error {
	if r.more > 0 {
		return errors.Join(append(r.shown, fmt.Errorf("and %d more", r.more))...)
	}
	return errors.Join(r.shown...)
}
