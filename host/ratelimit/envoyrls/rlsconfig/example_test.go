package rlsconfig_test

import (
	"fmt"

	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
)

// Example loads envoyproxy/ratelimit's README Example 3 and matches two
// descriptors: the most specific entry wins.
func Example() {
	d, err := rlsconfig.Parse("example3.yaml", []byte(`
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := rlsconfig.New(d)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ip := range []string{"50.0.0.1", "50.0.0.5"} {
		r := cfg.Match("edge_proxy_per_ip", []rlsconfig.Entry{{Key: "remote_address", Value: ip}})
		fmt.Println(ip, r.RequestsPerUnit, "per", r.Unit)
	}
	_, err = rlsconfig.Parse("bad.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	fmt.Println(err)
	// Output:
	// 50.0.0.1 10 per second
	// 50.0.0.5 0 per second
	// rlsconfig: bad.yaml:4: descriptors[0].rate_limit.unit: invalid unit "fortnight" (want second, minute, hour, day, week, month or year)
}
