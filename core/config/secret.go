package config

import "regexp"

var secretKey = regexp.MustCompile(`(?i)(token|secret|passw|api_?key|private_?key|credential|auth|cookie|^key$|_key$)`)

// IsSecretKey reports whether a key's value must never be logged or printed:
// configuration printing masks it and the audit log redacts it.
func IsSecretKey(k string) bool { return secretKey.MatchString(k) }
