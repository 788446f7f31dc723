// Package gcfloor keeps Go's garbage collector from running after every
// few megabytes of allocation when the live heap is small.
//
// The runtime's goal for the heap is the live heap times 1 + GOGC/100:
// with GOGC's default of 100 and the few MiB a Sluice with few keys
// holds, it collects after every 4–10 MiB allocated, hundreds of times a
// second under load, and each cycle costs the same fixed work (stacks,
// globals, the write barrier's phases) however little is garbage. A
// Floor sets GOGC, from the live heap it reads, so that while the process
// allocates quickly the goal is at least the live heap plus a fixed
// headroom: for a small heap the cycles become rarer at the cost of at
// most that headroom in memory, and a large heap (many keys) keeps GOGC's
// default and its proportion. A process allocating slowly (idle) keeps
// GOGC's default, so its heap, and what the scavenger hands back to the
// OS, stays small.
//
// Before that, StartUp covers a start: the runtime would collect at a
// 4 MiB heap, then 8 and 16, each cycle finding almost all of it (the
// config, the keys) still live. StartUp puts the first collection off
// until the heap reaches the headroom and then gives the percentage back.
//
// It owns only the process's GC percentage, and only while StartUp's
// start or Run runs; it never sets a memory limit.
package gcfloor
