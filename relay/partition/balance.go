package partition

import "sort"

// Plan is what a relay does with the partitions in one balancing step.
type Plan struct {
	// Limit is the most partitions one relay holds: ceil(P/N).
	Limit int
	// Release are held partitions to give back (the relay holds more than
	// Limit), highest first.
	Release []int
	// Try are partitions to try to acquire, in order, while the relay holds
	// fewer than Limit; each is tried only if the partition is free.
	Try []int
}

// Balance plans one step for a relay that holds held, is member self
// (0-based, in the order of the live members) of members live relays, on a
// feed of partitions partitions. It is a pure function: the Manager reads
// the inputs from Redis and acts on the plan.
//
// Each relay holds at most ceil(P/N). A relay below the limit tries the
// partitions it does not hold, starting at self×limit (so relays starting
// together try different partitions first); one above gives back its
// highest-numbered extras, for the others to take.
func Balance(partitions, members, self int, held []int) Plan {
	if partitions < 1 {
		partitions = 1
	}
	if members < 1 {
		members = 1
	}
	limit := (partitions + members - 1) / members
	hs := append([]int(nil), held...)
	sort.Ints(hs)
	p := Plan{Limit: limit}
	if len(hs) > limit {
		for i := len(hs) - 1; i >= limit; i-- {
			p.Release = append(p.Release, hs[i])
		}
		return p
	}
	if len(hs) == limit {
		return p
	}
	mine := map[int]bool{}
	for _, h := range hs {
		mine[h] = true
	}
	start := (self * limit) % partitions
	if start < 0 {
		start = 0
	}
	for i := 0; i < partitions; i++ {
		q := (start + i) % partitions
		if !mine[q] {
			p.Try = append(p.Try, q)
		}
	}
	return p
}
