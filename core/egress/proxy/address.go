package proxy

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// refusedRanges are addresses no name may lead to unless a granted CIDR
// covers them, beyond what netip classifies itself (loopback, private,
// link-local, multicast, unspecified): each with what it is, for the
// refusal. Ranges that embed an IPv4 address (NAT64, 6to4, Teredo) are
// refused whole: they could carry a private one through a gateway.
var refusedRanges = []struct {
	pfx  netip.Prefix
	what string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata service"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata service"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (100.64.0.0/10)"},
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (0.0.0.0/8)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (192.0.0.0/24)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (198.18.0.0/15)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast (240.0.0.0/4)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (it embeds an IPv4 address)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64 (it embeds an IPv4 address)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (it embeds an IPv4 address)"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (it embeds an IPv4 address)"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 (deprecated)"},
}

// refusedClass says what kind of refused address a is ("" for one anybody
// may reach): the classes the proxy never dials without a granted CIDR.
func refusedClass(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	}
	for _, r := range refusedRanges {
		if r.pfx.Contains(a) {
			return r.what
		}
	}
	switch {
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private"
	case !a.IsGlobalUnicast():
		return "not a unicast address"
	}
	return ""
}

// ownAddrs are the addresses of this machine's interfaces (the core's
// own), looked up again at most every ownTTL so that an address added
// later is refused too.
type ownAddrs struct {
	lookup func() ([]netip.Addr, error)
	mu     sync.Mutex
	at     time.Time
	set    map[netip.Addr]bool
	err    error
}

const ownTTL = 30 * time.Second

// interfaceAddrs is every address of this machine's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// has reports whether a is one of this machine's addresses. When they
// cannot be listed every address counts as one (fail closed).
func (o *ownAddrs) has(a netip.Addr) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.set == nil || time.Since(o.at) > ownTTL {
		list, err := o.lookup()
		o.at, o.err = time.Now(), err
		o.set = map[netip.Addr]bool{}
		for _, x := range list {
			o.set[x.Unmap()] = true
		}
	}
	if o.err != nil {
		return true, o.err
	}
	return o.set[a.Unmap()], nil
}
