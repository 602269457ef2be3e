package framework

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestWorkloadMounts checks which platform workloads mount each credential
// file: a workload restarts when one of its files changes, so a file mounted
// by the wrong one restarts a component for nothing, and a file mounted by
// none is never picked up.
func TestWorkloadMounts(t *testing.T) {
	p := &Platform{ControlPlane: &ManagedControlPlane{ControllerManager: true, MetricsServer: true, Tunnel: true}}
	want := map[string][]string{
		"etcd-ca.crt":                   {EtcdWorkload, APIServerWorkload},
		"etcd-server.crt":               {EtcdWorkload},
		"etcd-peer.key":                 {EtcdWorkload},
		"apiserver.crt":                 {APIServerWorkload},
		"apiserver-etcd-client.key":     {APIServerWorkload},
		"front-proxy-ca.crt":            {APIServerWorkload},
		"front-proxy-client.crt":        {APIServerWorkload},
		"kubelet-ca.crt":                {APIServerWorkload},
		"sa.key":                        {APIServerWorkload},
		"kcm.kubeconfig":                {ControllerManagerWorkload},
		"kcm-root-ca.crt":               {ControllerManagerWorkload},
		"kcm-sa.key":                    {ControllerManagerWorkload},
		"scheduler.kubeconfig":          {SchedulerWorkload},
		"metrics-server.crt":            {MetricsServerWorkload},
		"metrics-server.key":            {MetricsServerWorkload},
		"metrics-server-cluster-ca.crt": {MetricsServerWorkload},
		"metrics-server-kubelet-ca.crt": {MetricsServerWorkload},
		"vpn-server.key":                {APIServerWorkload},
		"vpn-ca.crt":                    {APIServerWorkload},
		"konnectivity-agent.crt":        {TunnelAgentWorkload},
		"konnectivity-agent-ca.crt":     {TunnelAgentWorkload},
	}
	files := credentialFiles("c")
	for _, f := range files {
		var got []string
		for _, w := range p.workloads() {
			if w.mounts(f) {
				got = append(got, w.name)
			}
		}
		if len(got) == 0 {
			t.Errorf("%s is mounted by no workload", f.file)
		}
		if w, ok := want[f.file]; ok && !slices.Equal(got, w) {
			t.Errorf("%s is mounted by %v, want %v", f.file, got, w)
		}
	}
	for file := range want {
		if !slices.ContainsFunc(files, func(f credentialFile) bool { return f.file == file }) {
			t.Errorf("%s is not a credential file", file)
		}
	}
}

// TestRolloutStages checks that the platform rolls workloads at once, but a
// single etcd member and a single API server alone and first: a component
// restarted while they are down would fail to start.
func TestRolloutStages(t *testing.T) {
	names := func(stages [][]workload) [][]string {
		var out [][]string
		for _, stage := range stages {
			var s []string
			for _, w := range stage {
				s = append(s, w.name)
			}
			out = append(out, s)
		}
		return out
	}
	w := func(name string, replicas int32) workload { return workload{name: name, replicas: replicas} }
	for _, tc := range []struct {
		name string
		due  []workload
		want [][]string
	}{
		{"highly available", []workload{w(EtcdWorkload, 3), w(APIServerWorkload, 2), w(ControllerManagerWorkload, 1)},
			[][]string{{EtcdWorkload, APIServerWorkload, ControllerManagerWorkload}}},
		{"single replicas", []workload{w(EtcdWorkload, 1), w(APIServerWorkload, 1), w(ControllerManagerWorkload, 1), w(SchedulerWorkload, 1)},
			[][]string{{EtcdWorkload}, {APIServerWorkload}, {ControllerManagerWorkload, SchedulerWorkload}}},
		{"a single API server alone", []workload{w(SchedulerWorkload, 1), w(APIServerWorkload, 1)},
			[][]string{{APIServerWorkload}, {SchedulerWorkload}}},
		{"a single etcd member alone", []workload{w(EtcdWorkload, 1)}, [][]string{{EtcdWorkload}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(rolloutStages(tc.due)); !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("rolloutStages = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRestartCrashed checks that Sync's first step restarts a workload whose
// process exited, and only that one, as the kubelet restarts a container.
func TestRestartCrashed(t *testing.T) {
	var restarted []string
	w := func(name string, crashed bool) workload {
		return workload{name: name,
			restart: func(context.Context) error { restarted = append(restarted, name); return nil },
			crashed: func() bool { return crashed }}
	}
	noCheck := workload{name: "no-check", restart: func(context.Context) error { restarted = append(restarted, "no-check"); return nil }}
	if err := (&Platform{}).restartCrashed(context.Background(), []workload{w("running", false), w("exited", true), noCheck}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(restarted, []string{"exited"}) {
		t.Errorf("restarted %v, want only the workload that exited", restarted)
	}
}

func TestWindowOverlaps(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 11, 27, 6, 0, s, 0, time.UTC) }
	w := Window{Start: at(10), End: at(20)}
	for name, tc := range map[string]struct {
		o     Window
		grace time.Duration
		want  bool
	}{
		"inside":                      {Window{at(12), at(13)}, 0, true},
		"spanning it":                 {Window{at(5), at(25)}, 0, true},
		"starting in it":              {Window{at(19), at(40)}, 0, true},
		"ending in it":                {Window{at(1), at(10)}, 0, true},
		"before it":                   {Window{at(1), at(8)}, 0, false},
		"before it, within the grace": {Window{at(1), at(8)}, 2 * time.Second, true},
		"after it":                    {Window{at(23), at(30)}, 2 * time.Second, false},
		"a moment after it":           {Window{at(21), at(21)}, 2 * time.Second, true},
	} {
		if got := w.Overlaps(tc.o, tc.grace); got != tc.want {
			t.Errorf("%s: Overlaps = %t, want %t", name, got, tc.want)
		}
	}
}
