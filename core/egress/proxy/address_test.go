package proxy

import (
	"net/netip"
	"strings"
	"testing"
)

// Every class of address no name may lead to without a granted range.
func TestRefusedClass(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd12::1": "private",
		"169.254.169.254": "metadata", "fd00:ec2::254": "metadata", "169.254.1.1": "link-local", "fe80::1": "link-local",
		"224.0.0.1": "multicast", "ff02::1": "multicast", "0.0.0.0": "unspecified", "0.1.2.3": "this network", "::": "unspecified",
		"100.64.0.1": "carrier-grade NAT", "100.100.100.200": "carrier-grade NAT", "255.255.255.255": "broadcast",
		"64:ff9b::a01:203": "NAT64", "2002:a01:203::1": "6to4", "198.18.0.1": "benchmarking",
		"203.0.113.7": "", "8.8.8.8": "", "2606:4700::1111": "", "172.32.0.1": "", "100.128.0.1": "",
	}
	for in, want := range cases {
		got := refusedClass(netip.MustParseAddr(in))
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: class %q, want %q", in, got, want)
		}
	}
}
