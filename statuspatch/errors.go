package statuspatch

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by every error a constructor of this package
// returns for a configuration it rejects; the error is a [*ConfigError]
// naming the field.
var ErrInvalidConfig = errors.New("statuspatch: invalid config")

// ConfigError says which field of which configuration is invalid and why.
// It wraps [ErrInvalidConfig]; use errors.As to read the field.
type ConfigError struct {
	// Config is the configuration type, e.g. "DispatcherConfig".
	Config string
	// Field is the name of the field, e.g. "Workers".
	Field string
	// Reason says what is wrong, e.g. "must be between 0 (meaning 1) and 1024, got -1".
	Reason string
}

// Error returns "statuspatch: <Config>.<Field> <Reason>".
func (e *ConfigError) Error() string {
	return "statuspatch: " + e.Config + "." + e.Field + " " + e.Reason
}

// Unwrap returns [ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

func configErr(config, field, format string, args ...any) error {
	return &ConfigError{Config: config, Field: field, Reason: fmt.Sprintf(format, args...)}
}
