// Package snippets holds one test: every Go snippet of the README and of
// the packages' documentation compiles against this repository's modules.
package snippets
