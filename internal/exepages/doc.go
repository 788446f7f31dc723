// Package exepages unmaps the pages of the executable's read-only
// segments (code and read-only data) that start-up touched, once it is
// over.
//
// A process's resident set counts every page of its binary it has
// touched, and the kernel maps up to 64 KiB of the page cache around
// each touched page (fault-around). Start-up touches most of the
// binary: every package's initialisation (protobuf's registration of
// each file descriptor, the largest), each message type's first use,
// the config's compilation. Serving touches a small part of it again. Release
// drops the process's mappings of those clean pages with
// madvise(MADV_DONTNEED): nothing is freed that holds data (the pages are
// read-only, never written, and still in the page cache), and a page
// the process touches again is mapped back from the cache by a minor
// fault, without I/O. A mapping holding any page of its own
// (copy-on-write, e.g. a debugger's breakpoint) is left alone.
//
// It owns only those mappings, and only on Linux; elsewhere Release does
// nothing.
package exepages
