// Package envoyrules is the table of the checks Envoy makes when it loads
// a configuration that the protoc-gen-validate rules (ValidateAll) do not
// express: a configuration can pass ValidateAll and still be refused by
// Envoy, or be accepted with a field Envoy never reads. Each Rule names
// the message it applies to, the Envoy source file and function it
// follows, what Envoy does (Severity: Refused, or Ignored for a
// [#not-implemented-hide:] field the consuming code never reads) and a
// check that returns Envoy's own error text.
//
// Sluice's control plane (xds.Validate, xds.ValidateSet) and the Envoy
// emulator (envoy/envoytest) both run this one table, so Sluice refuses to
// serve, and the emulator refuses to load, what a real Envoy refuses. What
// a caller does with an Ignored violation is its policy: xds.Validate
// refuses it (Sluice must never emit a field that does nothing), the
// emulator loads the resource, as Envoy does, with a warning.
//
// Walk is the one traversal of a configuration (every message, maps in key
// order, each Any unpacked, with its Path); Check runs the table over one
// resource through a Checker, CheckSet the rules that span a resource set
// (duplicate names, clusters a route configuration validates).
//
// README.md beside this file lists what the table covers (TLS, static
// secrets, ignored fields, the connection manager, clusters, routes,
// ext_proc, ext_authz, regexes, resource sets), the cross-references Envoy
// does not check at load and what it does instead, what is not covered,
// and how the rules were read from Envoy's source.
//
// The package must not import xds or the emulator, nor any other of
// Sluice's packages: it imports only Envoy's API, so that it states
// Envoy's facts and both may share it.
package envoyrules
