package policy_test

import (
	"fmt"

	"github.com/cellserver/cellserver/policy"
)

func ExampleParse() {
	set, err := policy.Parse([]byte(`
policies:
  - name: api
    algorithm: gcra
    burst: 15
    count: 30
    period: 1m
  - name: checkout
    all:
      - {policy: api, key: "global:checkout"}
      - {policy: api}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range set.Policies() {
		fmt.Println(p.Name, p)
	}
	_, err = policy.Parse([]byte("policies:\n  - {name: a, algorithm: fixed, limit: 0}\n"))
	fmt.Println(err)
	// Output:
	// api algorithm=gcra burst=15 count=30 period=60s
	// checkout algorithm=all member(policy=api key="global:checkout" algorithm=gcra burst=15 count=30 period=60s) member(policy=api key="${key}" algorithm=gcra burst=15 count=30 period=60s)
	// policy: invalid policy file, 2 problems: line 2: policy "a": limit must be a positive integer; line 2: policy "a": period is required for algorithm fixed
}
