// Package snippets holds the tests of the documentation against the code:
// every Go snippet of the README and of the packages' documentation
// compiles against this repository's modules (TestSnippetsCompile), and
// every pkg.Identifier the READMEs, docs/*.md and the doc comments name
// for a package of this repository exists there (TestDocIdentifiersExist).
package snippets
