package main

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// version is a release version, X.Y.Z (no pre-release or build part).
type version struct{ major, minor, patch int }

var versionRE = regexp.MustCompile(`^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`)

// parseVersion parses "X.Y.Z", with or without a leading "v".
func parseVersion(s string) (version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return version{}, fmt.Errorf("%q is not a version X.Y.Z", s)
	}
	var v version
	v.major, _ = strconv.Atoi(m[1])
	v.minor, _ = strconv.Atoi(m[2])
	v.patch, _ = strconv.Atoi(m[3])
	return v, nil
}

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch) }

func (v version) compare(w version) int {
	return cmp.Or(cmp.Compare(v.major, w.major), cmp.Compare(v.minor, w.minor), cmp.Compare(v.patch, w.patch))
}

// breaking is the least version after base that may break base's API:
// the next minor before 1.0, the next major from 1.0 on.
func (v version) breaking() version {
	if v.major == 0 {
		return version{0, v.minor + 1, 0}
	}
	return version{v.major + 1, 0, 0}
}

// allowed says whether the checkout, to be released as next, may differ
// from the API of the release base as found (incompatible: a change that
// can break a caller; compatible: an addition):
//
//   - an incompatible change needs next >= base.breaking(): before 1.0 a
//     minor bump (0.1.x -> 0.2.0), from 1.0 on a major one;
//   - additions are allowed while a release is prepared; when it is cut
//     (release), they need a minor bump at least (0.1.0 -> 0.2.0, not
//     0.1.1), and next must be above base.
func allowed(base, next version, incompatible, compatible, release bool) error {
	if next.compare(base) < 0 {
		return fmt.Errorf("the version file says %s, below the last release %s", next, base)
	}
	if release && next.compare(base) == 0 {
		return fmt.Errorf("version %s is released already: raise the version file", next)
	}
	if incompatible && next.compare(base.breaking()) < 0 {
		rule := "before 1.0, a minor release may break the API, a patch release may not"
		if base.major > 0 {
			rule = "from 1.0 on, only a major release may break the API (and needs the module path /v" + strconv.Itoa(base.major+1) + ")"
		}
		return fmt.Errorf("incompatible API changes since v%s (listed above) need version %s or later, the version file says %s: "+
			"raise it to %s, or keep the API compatible (%s; docs/releasing.md)", base, base.breaking(), next, base.breaking(), rule)
	}
	if release && compatible && next.major == base.major && next.minor == base.minor {
		return fmt.Errorf("API additions since v%s (listed above) need a minor release, %d.%d.0, not %s",
			base, base.major, base.minor+1, next)
	}
	return nil
}

// changelogSections are the subsections a version's entries go in.
var changelogSections = []string{"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}

var releasedRE = regexp.MustCompile(`^## (\d+\.\d+\.\d+) - (\d{4}-\d{2}-\d{2})$`)

// checkChangelog checks CHANGELOG.md's shape: "# Changelog", then
// "## Unreleased", then one "## X.Y.Z - YYYY-MM-DD" per release, newest
// first, each with a snapshot in apiDir and each snapshot with its section;
// subsections among changelogSections. The version being prepared (next)
// is not below the newest release. With release, Unreleased must list
// something.
func checkChangelog(text string, released []version, next version, release bool) error {
	lines := strings.Split(text, "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "# Changelog" {
		return errors.New(`the first line must be "# Changelog"`)
	}
	var (
		headings   []version
		section    string
		unreleased int // entries under Unreleased
	)
	for i, line := range lines {
		n := i + 1
		switch {
		case strings.HasPrefix(line, "## "):
			if section == "" {
				if line != "## Unreleased" {
					return fmt.Errorf(`line %d: the first section must be "## Unreleased", got %q`, n, line)
				}
				section = "Unreleased"
				continue
			}
			m := releasedRE.FindStringSubmatch(line)
			if m == nil {
				return fmt.Errorf(`line %d: want "## X.Y.Z - YYYY-MM-DD", got %q`, n, line)
			}
			v, _ := parseVersion(m[1])
			if len(headings) > 0 && v.compare(headings[len(headings)-1]) >= 0 {
				return fmt.Errorf("line %d: %s after %s: newest release first", n, v, headings[len(headings)-1])
			}
			headings, section = append(headings, v), v.String()
		case strings.HasPrefix(line, "### "):
			if section == "" {
				return fmt.Errorf("line %d: %q before any version section", n, line)
			}
			if name := strings.TrimPrefix(line, "### "); !slices.Contains(changelogSections, name) {
				return fmt.Errorf("line %d: subsection %q: want one of %s", n, name, strings.Join(changelogSections, ", "))
			}
		case strings.HasPrefix(line, "# ") && i > 0:
			return fmt.Errorf("line %d: a second title %q", n, line)
		case strings.HasPrefix(line, "- ") && section == "Unreleased":
			unreleased++
		}
	}
	if section == "" {
		return errors.New(`no "## Unreleased" section`)
	}
	for _, v := range released {
		if !slices.Contains(headings, v) {
			return fmt.Errorf("%s/v%s exists, but no section %q", apiDir, v, "## "+v.String()+" - <date>")
		}
	}
	for _, v := range headings {
		if !slices.Contains(released, v) {
			return fmt.Errorf("section %s has no API snapshot %s/v%s (make release writes both)", v, apiDir, v)
		}
	}
	if len(headings) > 0 && next.compare(headings[0]) < 0 {
		return fmt.Errorf("the version file says %s, below the newest release %s", next, headings[0])
	}
	if release && unreleased == 0 {
		return errors.New("nothing under Unreleased to release")
	}
	return nil
}

// cutChangelog moves the entries under Unreleased into a new section
// "## <v> - <date>" (subsections left empty dropped) below a fresh, empty
// Unreleased.
func cutChangelog(text string, v version, date string) (string, error) {
	lines := strings.Split(text, "\n")
	start := slices.Index(lines, "## Unreleased")
	if start < 0 {
		return "", errors.New(`no "## Unreleased" section`)
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}
	// The released section: the Unreleased body less empty subsections.
	var body []string
	var pending []string // a subsection heading and blank lines, kept once an entry follows
	for _, l := range lines[start+1 : end] {
		switch {
		case strings.HasPrefix(l, "### "):
			pending = []string{l}
		case strings.TrimSpace(l) == "":
			if pending != nil {
				pending = append(pending, l)
			} else {
				body = append(body, l)
			}
		default:
			body = append(body, pending...)
			pending = nil
			body = append(body, l)
		}
	}
	for len(body) > 0 && strings.TrimSpace(body[0]) == "" {
		body = body[1:]
	}
	for len(body) > 0 && strings.TrimSpace(body[len(body)-1]) == "" {
		body = body[:len(body)-1]
	}
	if len(body) == 0 {
		return "", errors.New("nothing under Unreleased to release")
	}
	out := slices.Clone(lines[:start])
	out = append(out, "## Unreleased", "")
	for _, s := range []string{"Added", "Changed", "Removed"} {
		out = append(out, "### "+s, "")
	}
	out = append(out, fmt.Sprintf("## %s - %s", v, date), "")
	out = append(out, body...)
	if end < len(lines) {
		out = append(out, "")
	}
	out = append(out, lines[end:]...)
	res := strings.Join(out, "\n")
	if !strings.HasSuffix(res, "\n") {
		res += "\n"
	}
	return res, nil
}
