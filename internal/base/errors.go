package base

import "errors"

// ErrInvalidConfig is wrapped by every error quietpatch returns for a
// configuration it rejects: a [*ConfigError] naming the field.
var ErrInvalidConfig = errors.New("quietpatch: invalid config")

// ErrAlreadyStarted is returned by a second call of Run, of every part of
// quietpatch: each runs once.
var ErrAlreadyStarted = errors.New("quietpatch: Run already called: Run may be called once")

// ConfigError says which field of a configuration is invalid and why. It
// wraps [ErrInvalidConfig]; use errors.As to read the field.
type ConfigError struct {
	// Field is the field's path as the caller writes it, relative to the
	// configuration value passed: "RenewGrace" for leader.Config.RenewGrace.
	Field string
	// Reason says what is wrong, e.g. "must be < LeaseDuration (15s), got 20s".
	Reason string
}

// Error returns "quietpatch: invalid config: <Field> <Reason>".
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + " " + e.Reason
}

// Unwrap returns [ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Prefix returns err with path put before the Field of the *ConfigError it
// wraps — the field's path in a configuration that holds the one
// rejected ("Lease." + "RenewGrace") —, or err as it is.
func Prefix(path string, err error) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		return &ConfigError{Field: path + ce.Field, Reason: ce.Reason}
	}
	return err
}

// WriteClaimKey is the context key of the statuspatch.WriteClaim the
// dispatcher attaches to every Patcher call (statuspatch.WriteClaimFrom
// reads it).
type WriteClaimKey struct{}
