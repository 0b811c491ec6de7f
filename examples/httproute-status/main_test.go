package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunExitStatus: the command's exit statuses and messages, without a
// cluster. The controller's own behaviour is tested in package controller.
func TestRunExitStatus(t *testing.T) {
	tests := []struct {
		name              string
		args              []string
		wantCode          int
		wantOut, wantErrs string
	}{
		{name: "help", args: []string{"-h"}, wantCode: 0, wantOut: "Usage: httproute-status [flags]"},
		{name: "bad flag value", args: []string{"--workers=-1"}, wantCode: 2,
			wantErrs: "httproute-status: invalid value for --workers: must be between 0 (automatic) and 1024, got -1\nRun 'httproute-status -h' for the flags."},
		{name: "unknown flag", args: []string{"--frobnicate"}, wantCode: 2, wantErrs: "flag provided but not defined: -frobnicate"},
		{name: "unreadable kubeconfig", args: []string{"--kubeconfig=/nonexistent/kubeconfig", "--metrics-addr=0", "--health-addr=0"},
			wantCode: 1, wantErrs: `loading kubeconfig \"/nonexistent/kubeconfig\"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tt.args, &stdout, &stderr, envOf(map[string]string{"POD_NAMESPACE": "qp-system"}))
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d; stderr: %s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tt.wantOut)
			}
			if !strings.Contains(stderr.String(), tt.wantErrs) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.wantErrs)
			}
		})
	}
}
