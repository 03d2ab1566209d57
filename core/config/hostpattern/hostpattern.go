// Package hostpattern is the grammar of the hosts a network policy names
// (network.allowed_hosts, a credential's hosts, what a run asks for, the
// target of a proxied request): DNS names, *.domain wildcards and IP
// addresses with an optional port, and the address ranges of
// network.allowed_cidrs. It is a leaf: core/config validates with it and
// core/egress matches with it.
package hostpattern

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Pattern is one parsed entry of network.allowed_hosts, or a host a
// run asks for, or the target of a proxied request.
type Pattern struct {
	// Name is a lower-case DNS name without a trailing dot; a wildcard is
	// "*.example.org". Empty for an IP address.
	Name string
	Addr netip.Addr // an IP address (IPv4-mapped IPv6 unmapped); invalid for a name
	Port int        // 0: unset (the default ports 80 and 443)
}

// Wildcard reports whether p matches the subdomains of a domain.
func (p Pattern) Wildcard() bool { return strings.HasPrefix(p.Name, "*.") }

// Host is the name or the address, without the port.
func (p Pattern) Host() string {
	if p.Addr.IsValid() {
		return p.Addr.String()
	}
	return p.Name
}

// String is p as forge.toml writes it; Parse reads it back.
func (p Pattern) String() string {
	h := p.Host()
	if p.Port == 0 {
		return h
	}
	if p.Addr.Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(p.Port)
}

// DefaultPorts are the ports of a pattern written without one.
var DefaultPorts = []int{80, 443}

// hostForms says what Parse accepts, for its errors.
const hostForms = "write a DNS name (files.example.org), a wildcard over a domain's subdomains (*.example.org) or an IP address, each with an optional :port (default ports 80 and 443)"

// Parse reads a host pattern: name, *.domain or IP address, then
// an optional :port (an IPv6 address with a port in brackets). Names are
// folded to lower case and lose one trailing dot; non-ASCII names must be
// written in punycode (xn--); a last label of digits only is refused (it
// reads as an IP address in a form resolvers disagree on).
func Parse(s string) (Pattern, error) {
	host, port, err := splitPort(s)
	if err != nil {
		return Pattern{}, err
	}
	p := Pattern{Port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Pattern{}, fmt.Errorf("%q: an IPv6 zone (%%%s) names an interface of this machine, not a host", s, a.Zone())
		}
		p.Addr = a.Unmap()
		return p, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	rest := name
	if strings.HasPrefix(name, "*.") {
		rest = name[2:]
		if !strings.Contains(rest, ".") {
			return Pattern{}, fmt.Errorf("%q: a wildcard must be over a domain below a top-level domain (*.example.org), not over %q", s, rest)
		}
	}
	if err := checkName(rest); err != nil {
		if name == "*" {
			return Pattern{}, fmt.Errorf("%q alone would match every host: list the names (or *.domain wildcards) runs may reach", s)
		}
		return Pattern{}, fmt.Errorf("%q is not a host pattern (%v): %s", s, err, hostForms)
	}
	p.Name = name
	return p, nil
}

// splitPort separates an optional :port from a host.
func splitPort(s string) (string, int, error) {
	host, portText := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("%q: an IPv6 address in brackets needs its closing ]", s)
		}
		host, portText = s[1:end], s[end+1:]
		if portText != "" && !strings.HasPrefix(portText, ":") {
			return "", 0, fmt.Errorf("%q: only :port may follow ]", s)
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return "", 0, fmt.Errorf("%q: brackets hold an IPv6 address only", s)
		}
	case strings.Count(s, ":") > 1: // a bare IPv6 address: no port
	default:
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, portText = s[:i], s[i:]
		}
	}
	if portText == "" {
		return host, 0, nil
	}
	digits := portText[1:]
	n, err := strconv.Atoi(digits)
	if err != nil || digits == "" || digits[0] < '0' || digits[0] > '9' || len(digits) > 5 {
		return "", 0, fmt.Errorf("%q: the port %q is not a number", s, digits)
	}
	if n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("%q: port %d is out of range 1-65535", s, n)
	}
	return host, n, nil
}

// checkName checks a lower-case DNS host name (RFC 1123 labels).
func checkName(n string) error {
	if n == "" {
		return errors.New("empty name")
	}
	if len(n) > 253 {
		return errors.New("longer than 253 characters")
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("label %q must be 1-63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if c >= 0x80 {
				return fmt.Errorf("label %q is not ASCII: write the name in punycode (xn--...)", l)
			}
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("label %q holds %q: names are letters, digits and '-'", l, c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return errors.New("its last label is digits only, which reads as an IP address: write the address in dotted form")
	}
	return nil
}

// ParseCIDR reads an entry of network.allowed_cidrs: a prefix in canonical
// form (no bits set past the prefix length), never /0.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8, 127.0.0.1/32 or fd00::/8)", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped range: write it as IPv4 (e.g. 10.0.0.0/8)", s)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its prefix length: write %s", s, m)
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("%q covers every address (loopback and cloud metadata too): list the ranges runs may reach", s)
	}
	return p, nil
}
