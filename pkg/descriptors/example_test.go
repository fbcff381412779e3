package descriptors_test

import (
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

func ExampleDomain_Resolve() {
	config, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        rate_limit: {unit: minute, requests_per_unit: 5}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	levels := config.Domain("api").Resolve([]descriptors.Entry{{Key: "user", Value: "alex"}, {Key: "action", Value: "trade"}}, nil, nil)
	for _, l := range levels {
		fmt.Println(l.Key, l.Rule.Limit, l.Rule.Rate)
	}
	// Output:
	// api|user=alex 60 (1 per 1s) 60/minute
	// api|user=alex|action=trade 5 (1 per 12s) 5/minute
}

func ExampleParse_error() {
	_, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s, drip_sise: 2}
`)})
	fmt.Println(err)
	// Output:
	// api.yaml:5: descriptors[0].leaky_bucket.drip_sise: unknown field (did you mean "drip_size"?) (known fields: size, drip_rate, drip_size)
}

func ExampleDomain_Explain() {
	config, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(`domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 60, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        rate_limit: {unit: minute, requests_per_unit: 5}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	walk := config.Domain("api").Explain([]descriptors.Entry{{Key: "user", Value: "alex"}, {Key: "action", Value: "buy"}}, nil)
	for _, st := range walk.Steps {
		fmt.Printf("api.yaml:%d %s (%s)\n", st.Line, st.Path, st.Match)
		for _, l := range st.Limits {
			fmt.Println("  checks", walk.Levels[l.Level].Key)
		}
	}
	fmt.Println("no node matches entry", walk.Unmatched)
	// Output:
	// api.yaml:3 user (any value)
	//   checks api|user=alex
	// no node matches entry 1
}
