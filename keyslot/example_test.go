package keyslot_test

import (
	"fmt"

	"github.com/cellserver/cellserver/keyslot"
)

// The slots Redis's CLUSTER KEYSLOT returns; keys with the same hash tag
// share a slot.
func ExampleOf() {
	for _, k := range []string{"foo", "somekey", "{user1000}.following", "{user1000}.followers"} {
		fmt.Printf("%s %d\n", k, keyslot.Of([]byte(k)))
	}
	// Output:
	// foo 12182
	// somekey 11058
	// {user1000}.following 3443
	// {user1000}.followers 3443
}

func ExampleTag() {
	for _, k := range []string{"{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "plain"} {
		fmt.Printf("%s -> %s\n", k, keyslot.Tag([]byte(k)))
	}
	// Output:
	// {user1000}.following -> user1000
	// foo{}{bar} -> foo{}{bar}
	// foo{{bar}}zap -> {bar
	// plain -> plain
}
