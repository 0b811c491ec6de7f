package main

import (
	"strings"
	"testing"
)

func v(s string) version {
	x, err := parseVersion(s)
	if err != nil {
		panic(err)
	}
	return x
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" for an error
	}{
		{"0.1.0", "0.1.0"}, {"v1.2.3", "1.2.3"}, {"10.0.12", "10.0.12"},
		{"0.1", ""}, {"01.2.3", ""}, {"1.2.3-rc.1", ""}, {"", ""}, {"v", ""},
	} {
		got, err := parseVersion(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("parseVersion(%q) = %s, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("parseVersion(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		label                             string
		base, next                        string
		incompatible, compatible, release bool
		err                               string // "" for allowed
	}{
		{label: "no change, same version", base: "0.1.0", next: "0.1.0"},
		{label: "additions while preparing", base: "0.1.0", next: "0.1.0", compatible: true},
		{label: "break, no bump", base: "0.1.0", next: "0.1.0", incompatible: true, err: "need version 0.2.0"},
		{label: "break, patch bump", base: "0.1.0", next: "0.1.1", incompatible: true, err: "need version 0.2.0"},
		{label: "break, minor bump before 1.0", base: "0.1.3", next: "0.2.0", incompatible: true},
		{label: "break, major bump before 1.0", base: "0.4.0", next: "1.0.0", incompatible: true},
		{label: "break, minor bump from 1.0", base: "1.2.0", next: "1.3.0", incompatible: true, err: "need version 2.0.0"},
		{label: "break, major bump from 1.0", base: "1.2.0", next: "2.0.0", incompatible: true},
		{label: "version below the release", base: "0.2.0", next: "0.1.9", err: "below the last release"},
		{label: "release of a released version", base: "0.1.0", next: "0.1.0", release: true, err: "released already"},
		{label: "release, additions, patch bump", base: "0.1.0", next: "0.1.1", compatible: true, release: true, err: "need a minor release, 0.2.0"},
		{label: "release, additions, minor bump", base: "0.1.0", next: "0.2.0", compatible: true, release: true},
		{label: "release, fixes only, patch bump", base: "0.1.0", next: "0.1.1", release: true},
		{label: "release, break, minor bump before 1.0", base: "0.1.0", next: "0.2.0", incompatible: true, compatible: true, release: true},
	} {
		err := allowed(v(tc.base), v(tc.next), tc.incompatible, tc.compatible, tc.release)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v, want allowed", tc.label, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error with %q", tc.label, err, tc.err)
		}
	}
}

const changelog = `# Changelog

Intro.

## Unreleased

### Added

- New thing.

### Changed

### Removed

- Old thing: use the new thing.

## 0.1.0 - 2026-12-02

### Added

- First.
`

func TestCheckChangelog(t *testing.T) {
	for _, tc := range []struct {
		label    string
		text     string
		released []string
		next     string
		release  bool
		err      string
	}{
		{label: "good", text: changelog, released: []string{"0.1.0"}, next: "0.2.0", release: true},
		{label: "no release yet", text: "# Changelog\n\n## Unreleased\n\n### Added\n", next: "0.1.0"},
		{label: "nothing to release", text: "# Changelog\n\n## Unreleased\n\n### Added\n", next: "0.1.0", release: true, err: "nothing under Unreleased"},
		{label: "no title", text: "## Unreleased\n", next: "0.1.0", err: "# Changelog"},
		{label: "no Unreleased first", text: "# Changelog\n\n## 0.1.0 - 2026-12-02\n", released: []string{"0.1.0"}, next: "0.1.0", err: "must be \"## Unreleased\""},
		{label: "snapshot without section", text: "# Changelog\n\n## Unreleased\n", released: []string{"0.1.0"}, next: "0.1.0", err: "api/v0.1.0 exists"},
		{label: "section without snapshot", text: changelog, next: "0.2.0", err: "no API snapshot"},
		{label: "unknown subsection", text: strings.Replace(changelog, "### Changed", "### Misc", 1), released: []string{"0.1.0"}, next: "0.2.0", err: "subsection \"Misc\""},
		{label: "bad heading", text: strings.Replace(changelog, "## 0.1.0 - 2026-12-02", "## v0.1.0", 1), released: []string{"0.1.0"}, next: "0.2.0", err: "want \"## X.Y.Z - YYYY-MM-DD\""},
		{label: "oldest first", text: changelog + "\n## 0.2.0 - 2026-12-03\n", released: []string{"0.1.0", "0.2.0"}, next: "0.2.0", err: "newest release first"},
		{label: "version below the newest section", text: changelog, released: []string{"0.1.0"}, next: "0.0.9", err: "below the newest release"},
	} {
		var rel []version
		for _, r := range tc.released {
			rel = append(rel, v(r))
		}
		err := checkChangelog(tc.text, rel, v(tc.next), tc.release)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v, want nil", tc.label, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want an error with %q", tc.label, err, tc.err)
		}
	}
}

func TestCutChangelog(t *testing.T) {
	got, err := cutChangelog(changelog, v("0.2.0"), "2027-01-15")
	if err != nil {
		t.Fatal(err)
	}
	want := `# Changelog

Intro.

## Unreleased

### Added

### Changed

### Removed

## 0.2.0 - 2027-01-15

### Added

- New thing.

### Removed

- Old thing: use the new thing.

## 0.1.0 - 2026-12-02

### Added

- First.
`
	if got != want {
		t.Errorf("cutChangelog:\n%s\nwant:\n%s", got, want)
	}
	if err := checkChangelog(got, []version{v("0.1.0"), v("0.2.0")}, v("0.2.0"), false); err != nil {
		t.Errorf("the cut changelog does not pass the check: %v", err)
	}
	if _, err := cutChangelog("# Changelog\n\n## Unreleased\n\n### Added\n\n## 0.1.0 - 2026-12-02\n", v("0.2.0"), "2027-01-15"); err == nil {
		t.Error("cutChangelog of an empty Unreleased: no error")
	}
}
