// Package gcpace sets how far Go's heap may grow between collections:
// a fixed headroom past what the last collection found live, rather than
// GOGC's proportion of it.
//
// The runtime's goal for the heap is the live heap plus GOGC/100 of the
// live heap, the stacks and the globals. With GOGC's default of 100 both
// ends go wrong for Sluice. A Sluice with few keys holds a few MiB, so it
// collects after every 4–10 MiB allocated, hundreds of times a second
// under load, and each cycle costs the same fixed work (stacks, globals,
// the protobuf registries, the write barrier's phases) however little is
// garbage. A Sluice with many keys and open streams holds tens of MiB
// that live as long as the process or the stream — the key table, which
// is free of pointers and never scanned, and the streams' stacks — and
// the proportion doubles them in memory for nothing: how often the
// collector must run depends on how fast the process allocates, not on
// how much it keeps.
//
// A Pacer reads the heap every interval and sets GOGC so that, while the
// process allocates quickly, the goal is the live heap plus a fixed
// headroom, whatever its size: the collector runs once per headroom
// allocated. The percentage stays within [LeastPercent, MaxPercent], so a
// huge heap still gets a quarter of itself. A process allocating slowly
// (idle) gets no more than GOGC's default, so its heap, and what the
// scavenger hands back to the OS, stays small.
//
// Before that, StartUp covers a start: the runtime would collect at a
// 4 MiB heap, then 8 and 16, each cycle finding almost all of it (the
// config, the keys) still live. StartUp puts the first collection off
// until the heap reaches its headroom and then gives the percentage back.
//
// It owns only the process's GC percentage, and only while StartUp's
// start or Run runs; it never sets a memory limit. Where the environment
// sets GOGC, serve uses neither.
package gcpace
