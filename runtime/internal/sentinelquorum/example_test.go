package sentinelquorum_test

import (
	"errors"
	"fmt"

	"github.com/caphost/caphost/runtime/internal/sentinelquorum"
)

// Mid-failover: one Sentinel already names the promoted replica, one still
// names the old primary and one timed out. Nothing has a quorum, so the
// primary does not move until a second Sentinel names the new one.
func ExampleDecide() {
	answers := []sentinelquorum.Answer{
		{Sentinel: 0, Reply: []string{"10.0.0.2", "6379"}},
		{Sentinel: 1, Reply: []string{"10.0.0.1", "6379"}},
		{Sentinel: 2, Err: errors.New("i/o timeout")},
	}
	rules := sentinelquorum.Rules{Quorum: sentinelquorum.Quorum(3)}
	v := sentinelquorum.Decide(answers, 3, rules)
	fmt.Println(v.Outcome, v.Responded, "of", v.Asked, "responded")

	answers[2] = sentinelquorum.Answer{Sentinel: 2, Reply: []string{"10.0.0.2", "6379"}}
	v = sentinelquorum.Decide(answers, 3, rules)
	fmt.Println(v.Outcome, v.Primary, v.Agreeing, "agree")
	// Output:
	// no-quorum 2 of 3 responded
	// agreed 10.0.0.2:6379 2 agree
}
