package cmdflags

import "fmt"

// UsageError marks errors in what the user asked for (a bad flag value, a
// missing or conflicting flag): the program exits 2 with it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, args ...any) error { return UsageError{Err: fmt.Errorf(format, args...)} }
