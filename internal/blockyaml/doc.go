// Package blockyaml parses the plain subset of YAML that configuration
// files are written in — block mappings and lists, plain and simply quoted
// scalars, one-line flow collections, comments — into the yaml.v3 node tree
// yaml.v3 itself would build, several times faster and with a fraction of
// its allocations. A sluice.yaml that declares a hundred thousand keys is
// almost all such lines.
//
// Parse declines every document outside the subset (anchors, tags,
// multi-line scalars, escapes, tabs, non-ASCII bytes, several documents,
// and every syntax error) rather than guess: the caller then parses it
// with yaml.v3, which also words the errors. FuzzParse holds the contract:
// a tree Parse returns equals yaml.v3's in every field but the comments.
//
// It owns no policy: it knows nothing of what a sluice.yaml means.
package blockyaml
