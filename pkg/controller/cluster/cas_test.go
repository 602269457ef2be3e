package cluster

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

func TestRestoreOldCA(t *testing.T) {
	const id, earlier = "2026-11-26T10:00:00Z", "2026-05-01T10:00:00Z"
	oldCA, newCA := pkitest.NewCA(t, "old"), pkitest.NewCA(t, "new")
	started, err := time.Parse(time.RFC3339, id)
	if err != nil {
		t.Fatal(err)
	}
	mintedAt := func(name string, at time.Time) *pki.KeyPair {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		ca, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: 24 * time.Hour}, key, at)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	// Minted long before the start, and by the rotation, its clock behind.
	mintedBefore, mintedByIt := mintedAt("old", started.Add(-time.Hour)), mintedAt("new", started.Add(-30*time.Second))
	// Minted just before the start: the times do not tell.
	mintedJustBefore := mintedAt("old", started.Add(-30*time.Second))
	for _, tt := range []struct {
		name        string
		in          credentials.CAs
		id          string
		started     time.Time
		want        credentials.CAs
		wantSwapped bool
		wantErr     string
	}{
		{"the rotation's new CA current, times known: swapped",
			credentials.CAs{Current: mintedByIt, Previous: mintedBefore, Rotation: id}, id, started,
			credentials.CAs{Current: mintedBefore, Previous: mintedByIt, Rotation: id, AbortedRotation: id}, true, ""},
		{"swapped, put back by hand without the aborted-rotation annotation: kept, the annotation back",
			credentials.CAs{Current: mintedBefore, Previous: mintedByIt, Rotation: id}, id, started,
			credentials.CAs{Current: mintedBefore, Previous: mintedByIt, Rotation: id, AbortedRotation: id}, false, ""},
		{"an old CA minted just before the start: the annotations say",
			credentials.CAs{Current: mintedJustBefore, Previous: mintedByIt, Rotation: id}, id, started,
			credentials.CAs{Current: mintedByIt, Previous: mintedJustBefore, Rotation: id, AbortedRotation: id}, true, ""},
		{"this rotation's new CA: the old one is current again",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: id}, id, time.Time{},
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, true, ""},
		{"swapped before a crash: never swapped back",
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, id, time.Time{},
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, false, ""},
		{"the new CA already deleted",
			credentials.CAs{Current: oldCA, Rotation: id, AbortedRotation: id}, id, time.Time{},
			credentials.CAs{Current: oldCA, Rotation: id, AbortedRotation: id}, false, ""},
		{"aborted before this role got a new CA",
			credentials.CAs{Current: oldCA, Rotation: earlier}, id, time.Time{},
			credentials.CAs{Current: oldCA, Rotation: earlier}, false, ""},
		{"a status without the rotation's start: the Secret says which CA is new",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: earlier}, "", time.Time{},
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: earlier, AbortedRotation: earlier}, true, ""},
		{"an earlier abort's record does not count for this rotation",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: id, AbortedRotation: earlier}, id, time.Time{},
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, true, ""},
		{"two CAs and no rotation annotation: which is new is unknown",
			credentials.CAs{Current: newCA, Previous: oldCA}, id, time.Time{},
			credentials.CAs{Current: newCA, Previous: oldCA}, false, "no carousel.dev/rotation annotation"},
		{"a Secret restored from another rotation's copy is not swapped",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: earlier}, id, time.Time{},
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: earlier}, false, "not from the one aborted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			swapped, err := restoreOldCA(&got, tt.id, tt.started)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("restoreOldCA: err = %v, want %q", err, tt.wantErr)
			}
			if swapped != tt.wantSwapped || got != tt.want {
				t.Fatalf("restoreOldCA = %v, %+v; want %v, %+v", swapped, got, tt.wantSwapped, tt.want)
			}
		})
	}
}

// A step that generates or removes the CAs of several roles records one
// event naming each of them: the events library would fold one event per
// role into the first one's series and show that role alone.
func TestOneEventNamesEveryCAOfAStep(t *testing.T) {
	ctx := context.Background()
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: "default", UID: "events-uid"},
		Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}}
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), Clock: clock.RealClock{}, Recorder: recorder}
	objs := &objects{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	recorded := func() []string {
		var out []string
		for len(recorder.Events) > 0 {
			out = append(out, <-recorder.Events)
		}
		return out
	}
	expectOneNaming := func(got []string, reason string, cas map[v1alpha1.CARole]*pki.KeyPair) {
		t.Helper()
		if len(got) != 1 || !strings.HasPrefix(got[0], corev1.EventTypeNormal+" "+reason+" ") {
			t.Fatalf("events %q, want one %s", got, reason)
		}
		for role, ca := range cas {
			if want := string(role) + " CA " + pki.Fingerprint(ca.Cert); !strings.Contains(got[0], want) {
				t.Errorf("event %q does not name %s", got[0], want)
			}
		}
		if len(got[0]) > 1024 {
			t.Errorf("the note is %d bytes, over an event's 1 kB", len(got[0]))
		}
	}

	all, err := r.ensureCAs(ctx, c, objs)
	if err != nil {
		t.Fatal(err)
	}
	generated := map[v1alpha1.CARole]*pki.KeyPair{}
	for role, cas := range all {
		generated[role] = cas.Current
	}
	expectOneNaming(recorded(), v1alpha1.EventCAGenerated, generated)

	// Each role keeps a previous CA: the front-proxy one, which is all the
	// removal needs to name.
	previous := generated[v1alpha1.CARoleFrontProxy]
	for role := range all {
		all[role] = &credentials.CAs{Current: generated[role], Previous: previous}
	}
	if err := r.dropOldCAs(ctx, c, objs, all); err != nil {
		t.Fatal(err)
	}
	got := recorded()
	expectOneNaming(got, v1alpha1.EventCARemoved, map[v1alpha1.CARole]*pki.KeyPair{v1alpha1.CARoleCluster: previous, v1alpha1.CARoleVPN: previous})
	if n := strings.Count(got[0], " CA "); n != len(v1alpha1.CARoles()) {
		t.Errorf("event %q names %d CAs, want one per role", got[0], n)
	}
}

// A new Cluster's first pass lets the creates of its CA and service-account
// key Secrets check that none is there: it reads none of them from the API
// server.
func TestANewClustersCreatesAreTheCheckThatItsSecretsAreMissing(t *testing.T) {
	c := newCluster("new")
	r, reads := reconcilerOn(newFakeAPI(c))
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}); err != nil {
		t.Fatal(err)
	}
	if n := reads.secrets; n != 0 {
		t.Errorf("the first pass of a new Cluster read %d Secrets from the API server, want 0", n)
	}
}

// A Secret there unlabelled on a new Cluster is found by its create: the key
// generated for it is dropped, the Secret left as it is, and the passes
// after the one that recorded it read it before they generate a key, so that
// they generate none.
func TestANewClustersUnlabelledSecretIsFoundByItsCreate(t *testing.T) {
	for _, tc := range []struct {
		secret, want string
		ca           bool // the Secret of the vpn CA, which no event may then announce
		// labels: another Cluster's, whose objects' names collide.
		labels map[string]string
	}{
		{credentials.CASecretName("unlabelled", v1alpha1.CARoleVPN), "holds the vpn CA but lacks Carousel's labels", true, nil},
		{credentials.ServiceAccountKeySecretName("unlabelled"), "holds the service-account key but lacks Carousel's labels", false, nil},
		{credentials.CASecretName("unlabelled", v1alpha1.CARoleVPN), "belongs to Cluster unlabelled-ca (label carousel.dev/cluster=unlabelled-ca)", true,
			map[string]string{v1alpha1.LabelCluster: "unlabelled-ca", v1alpha1.LabelCertificate: "vpn"}},
	} {
		t.Run(tc.want, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster("unlabelled")
			unlabelled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: tc.secret, Labels: tc.labels},
				Data: map[string][]byte{"note": []byte("restored by hand")}}
			api := newFakeAPI(c, unlabelled.DeepCopy())
			r, _ := reconcilerOn(api)
			recorder := events.NewFakeRecorder(100)
			r.Recorder = recorder
			for pass := range 3 {
				keys := pki.KeysGenerated()
				_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("pass %d: %v, want %q", pass, err, tc.want)
				}
				if n := pki.KeysGenerated() - keys; pass > 0 && n != 0 {
					t.Errorf("pass %d generated %d keys once the Secret was found unlabelled, want 0", pass, n)
				}
			}
			got := &corev1.Secret{}
			if err := api.Get(ctx, client.ObjectKeyFromObject(unlabelled), got); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Labels, tc.labels) || len(got.OwnerReferences) != 0 || string(got.Data["note"]) != "restored by hand" || len(got.Data) != 1 {
				t.Errorf("the unlabelled Secret was changed: %+v", got)
			}
			for len(recorder.Events) > 0 {
				if e := <-recorder.Events; tc.ca && strings.Contains(e, " "+v1alpha1.EventCAGenerated+" ") && strings.Contains(e, "vpn CA") {
					t.Errorf("an event announces a vpn CA: %s", e)
				}
			}
			cluster := &v1alpha1.Cluster{}
			if err := api.Get(ctx, client.ObjectKeyFromObject(c), cluster); err != nil {
				t.Fatal(err)
			}
			if ready := meta.FindStatusCondition(cluster.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse {
				t.Errorf("Ready is %+v, want False", ready)
			}
		})
	}
}

// A CA Secret a new Cluster adopts whose certificate may not sign
// certificates (no certSign) is refused, naming why, and no pass generates
// a key for it: taken, every leaf it signed failed SignedBy at the next
// pass, which issued them all again, new keys each time, at every pass.
func TestAnAdoptedCAThatMayNotSignIsRefused(t *testing.T) {
	ctx := context.Background()
	c := newCluster("adopted")
	data, err := credentials.EncodeCASecretData(&credentials.CAs{Current: pkitest.NewCAThatMayNotSign(t, "digital-signature-only", time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	adopted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, v1alpha1.CARoleClient),
		Labels: credentials.CALabels(c.Name, v1alpha1.CARoleClient)}, Data: data}
	api := newFakeAPI(c, adopted)
	r, _ := reconcilerOn(api)
	for pass := range 3 {
		keys := pki.KeysGenerated()
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		if err == nil || !strings.Contains(err.Error(), "lacks certSign") {
			t.Fatalf("pass %d: %v, want the client CA refused", pass, err)
		}
		if n := pki.KeysGenerated() - keys; pass > 0 && n != 0 {
			t.Errorf("pass %d generated %d keys, want 0", pass, n)
		}
	}
}

// A Secret there and labelled that the cache has not seen yet is found by its
// create on a new Cluster: the pass is retried, and says nothing of the
// Cluster's credentials (no Ready condition). The pass after it, once the
// Secret is gone, issues them.
func TestANewClustersPassOnAStaleCacheIsRetried(t *testing.T) {
	ctx := context.Background()
	c := newCluster("stale")
	c.Generation = 2
	there := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, v1alpha1.CARoleVPN),
		Labels: credentials.CALabels(c.Name, v1alpha1.CARoleVPN)}}
	api := newFakeAPI(c, there.DeepCopy())
	api.uncached = map[string]bool{there.Name: true}
	r, _ := reconcilerOn(api)
	recorder := events.NewFakeRecorder(100)
	r.Recorder = recorder
	status := func() v1alpha1.ClusterStatus {
		got := &v1alpha1.Cluster{}
		if err := api.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	ready := func() *metav1.Condition {
		return meta.FindStatusCondition(status().Conditions, v1alpha1.ConditionReady)
	}
	result, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err != nil || result.RequeueAfter == 0 {
		t.Fatalf("result %+v, error %v; want a retry", result, err)
	}
	if got := ready(); got != nil {
		t.Errorf("a pass that stopped on a stale cache set Ready: %+v", got)
	}
	if got := status().ObservedGeneration; got != 0 {
		t.Errorf("a pass that stopped on a stale cache observed generation %d", got)
	}
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, " "+v1alpha1.EventCAGenerated+" ") && strings.Contains(e, "vpn CA") {
			t.Errorf("an event announces the vpn CA, whose key was dropped: %s", e)
		}
	}

	if err := api.Delete(ctx, there); err != nil {
		t.Fatal(err)
	}
	api.uncached = nil
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got == nil || got.Status != metav1.ConditionTrue {
		t.Errorf("Ready is %+v after the cache caught up, want True", got)
	}
	if got := status().ObservedGeneration; got != c.Generation {
		t.Errorf("observed generation %d after the cache caught up, want %d", got, c.Generation)
	}
}

// A Cluster whose status lists its credentials as issued reads a missing
// Secret before it generates anything, even without a Ready condition (a
// status written back without its conditions): a lost CA or service-account
// key is reported, never replaced.
func TestAnIssuedSecretIsReadBeforeAnyKeyWithoutAReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		secret func(cluster string) string
		want   string
	}{
		{func(cluster string) string { return credentials.CASecretName(cluster, v1alpha1.CARoleEtcd) }, "holding the etcd CA is missing"},
		{credentials.ServiceAccountKeySecretName, "holding the service-account key is missing"},
	} {
		sc := newSettledCluster(t)
		ctx := context.Background()
		c := sc.cluster()
		meta.RemoveStatusCondition(&c.Status.Conditions, v1alpha1.ConditionReady)
		if err := sc.api.Status().Update(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := sc.api.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: tc.secret(c.Name)}}); err != nil {
			t.Fatal(err)
		}
		keys := pki.KeysGenerated()
		_, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
		if n := pki.KeysGenerated() - keys; n != 0 {
			t.Errorf("%d keys generated, want 0", n)
		}
	}
}

// reissue-ca accepts new CAs for the roles it names, and nothing else: a
// service-account key lost with them still holds the Cluster, whatever roles
// (all of them too) are reissued. The key was written anew, without a word,
// every ServiceAccount token invalid, while the inventory lacked a role.
func TestReissueCALeavesALostServiceAccountKeyLost(t *testing.T) {
	for name, roles := range map[string][]v1alpha1.CARole{
		"one role":  {v1alpha1.CARoleEtcd},
		"every one": v1alpha1.CARoles(),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			sc := newSettledCluster(t)
			c := sc.cluster()
			lost := []string{credentials.ServiceAccountKeySecretName(c.Name)}
			var names []string
			for _, role := range roles {
				lost = append(lost, credentials.CASecretName(c.Name, role))
				names = append(names, string(role))
			}
			for _, name := range lost {
				if err := sc.api.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key}); err == nil {
				t.Fatal("a pass with the CA Secrets lost succeeded")
			}
			sc.annotate(v1alpha1.OperationReissueCAPrefix + strings.Join(names, ","))
			keys := pki.KeysGenerated()
			for range 3 {
				_, _ = sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
			}
			if err := sc.api.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: lost[0]}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("the service-account key Secret: %v, want it still missing", err)
			}
			if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonServiceAccountKeyLost {
				t.Errorf("Ready is %+v, want ServiceAccountKeyLost", ready)
			}
			if n := pki.KeysGenerated() - keys; n != uint64(len(roles)) {
				t.Errorf("%d keys generated, want one for each reissued CA, %d", n, len(roles))
			}
		})
	}
}

// reissue-service-account-key announces a new key (a Warning event, as every
// token signed by the lost one stops being valid) only when it wrote one: a
// create that failed, or that found a Secret put back since the operation
// read that there was none, keeps the operation for the next try, which
// writes a key or finds the one put back.
func TestReissueServiceAccountKeyAnnouncesOnlyAKeyItWrote(t *testing.T) {
	for _, tc := range []struct {
		name string
		// meanwhile runs before the create of the service-account key's
		// Secret, the lost key's Secret at hand.
		meanwhile func(context.Context, client.WithWatch, *corev1.Secret) error
		// wrote: the next try writes a new key.
		wrote bool
		// blocked is the reason of Ready after the pass that follows; ""
		// for True.
		blocked string
	}{
		{"the create fails", func(context.Context, client.WithWatch, *corev1.Secret) error {
			return apierrors.NewInternalError(errors.New("etcd is down"))
		}, true, ""},
		{"the Secret is restored meanwhile", func(ctx context.Context, cl client.WithWatch, lost *corev1.Secret) error {
			restored := lost.DeepCopy()
			restored.ResourceVersion = ""
			return cl.Create(ctx, restored)
		}, false, ""},
		{"the Secret is restored meanwhile, unlabelled", func(ctx context.Context, cl client.WithWatch, lost *corev1.Secret) error {
			restored := lost.DeepCopy()
			restored.ResourceVersion, restored.Labels = "", nil
			return cl.Create(ctx, restored)
		}, false, v1alpha1.ReasonServiceAccountKeyUnlabelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sc := newSettledCluster(t)
			recorder := events.NewFakeRecorder(100)
			sc.r.Recorder = recorder
			name := credentials.ServiceAccountKeySecretName(sc.key.Name)
			lost := &corev1.Secret{}
			if err := sc.api.Get(ctx, client.ObjectKey{Namespace: sc.key.Namespace, Name: name}, lost); err != nil {
				t.Fatal(err)
			}
			if err := sc.api.Delete(ctx, lost); err != nil {
				t.Fatal(err)
			}
			sc.annotate(v1alpha1.OperationReissueServiceAccountKey)
			sc.api.mu.Lock()
			sc.api.beforeCreate = func(ctx context.Context, cl client.WithWatch, obj client.Object) error {
				if obj.GetName() != name {
					return nil
				}
				sc.api.beforeCreate = nil // under api.mu: see the Create interceptor
				return tc.meanwhile(ctx, cl, lost)
			}
			sc.api.mu.Unlock()
			_, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
			if _, pending := sc.cluster().Annotations[v1alpha1.OperationAnnotation]; !pending || err == nil {
				t.Fatalf("annotation pending %t, error %v; want the operation kept for the next try", pending, err)
			}
			if got := eventReasons(recorder); got[v1alpha1.EventServiceAccountKeyReissued] != 0 || got[v1alpha1.EventOperationNotRecorded] != 1 {
				t.Errorf("events %v, want one %s and no new key announced", got, v1alpha1.EventOperationNotRecorded)
			}

			sc.reconcile() // the next try
			if _, pending := sc.cluster().Annotations[v1alpha1.OperationAnnotation]; pending {
				t.Error("the operation is still pending after its second try")
			}
			s := &corev1.Secret{}
			if err := sc.api.Get(ctx, client.ObjectKeyFromObject(lost), s); err != nil {
				t.Fatal(err)
			}
			restored := string(s.Data[credentials.DataKeyServiceAccountKey]) == string(lost.Data[credentials.DataKeyServiceAccountKey])
			if got := eventReasons(recorder); restored == tc.wrote || got[v1alpha1.EventServiceAccountKeyReissued] != map[bool]int{false: 0, true: 1}[tc.wrote] {
				t.Errorf("the key restored %t, events %v; want a new key written and announced: %t", restored, got, tc.wrote)
			}

			_, err = sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
			if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); (err != nil) != (tc.blocked != "") ||
				tc.blocked == "" && ready.Status != metav1.ConditionTrue || tc.blocked != "" && ready.Reason != tc.blocked {
				t.Errorf("the pass after: error %v, Ready %+v; want True or blocked: %q", err, ready, tc.blocked)
			}
		})
	}
}

// A CA Secret put back from a copy made before the rotation's new CA, once
// the status records that CA, is refused: in Preparing it is not rotated a
// second time (another new CA would strand what the first one signed), in
// Prepared its old CA does not replace the new one in the trust bundles. In
// Aborting, once the status records the old CA as current again and the
// aborted new one as previous, the copy (the old CA alone, without the
// rotation's annotations) is refused too: taken as it is, it would drop the
// new CA from the trust bundles while clients the rotation moved to it still
// present its certificates. The pass generates no key and leaves the Secret
// as it was.
func TestACASecretPutBackFromBeforeTheRotationIsRefused(t *testing.T) {
	refusal := map[v1alpha1.CARotationPhase]string{
		v1alpha1.RotationPreparing: "it was put back from an older copy",
		v1alpha1.RotationPrepared:  "it was put back from an older copy",
		v1alpha1.RotationAborting:  "it was put back from a copy made before the rotation",
	}
	for _, phase := range []v1alpha1.CARotationPhase{v1alpha1.RotationPreparing, v1alpha1.RotationPrepared, v1alpha1.RotationAborting} {
		t.Run(string(phase), func(t *testing.T) {
			ctx := context.Background()
			sc := newSettledCluster(t)
			key := client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.CASecretName(sc.key.Name, v1alpha1.CARoleClient)}
			before := &corev1.Secret{}
			if err := sc.api.Get(ctx, key, before); err != nil {
				t.Fatal(err)
			}
			sc.annotate(v1alpha1.OperationStartCARotation)
			sc.statusWritesUntil(v1alpha1.RotationPrepared)
			if phase == v1alpha1.RotationPreparing { // the copy put back before the rotation went on
				c := sc.cluster()
				rot := c.CARotation().DeepCopy()
				rot.Phase, rot.LastInitiationFinishedTime = phase, nil
				setCARotation(c, rot)
				if err := sc.api.Status().Update(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			if phase == v1alpha1.RotationAborting {
				sc.annotate(v1alpha1.OperationAbortCARotation)
				old, err := credentials.DecodeCASecret(before)
				if err != nil {
					t.Fatal(err)
				}
				swapped := func() bool {
					c := sc.cluster()
					current, previous := recordedCAs(c, v1alpha1.CARoleClient)
					return c.CARotationPhase() == phase && previous != nil && current.Fingerprint == pki.Fingerprint(old.Current.Cert)
				}
				for i := 0; i < 10 && !swapped(); i++ {
					sc.reconcile()
				}
				if !swapped() {
					t.Fatalf("the status does not record the client CAs swapped back in Aborting: phase %s", sc.cluster().CARotationPhase())
				}
			}
			keys := pki.KeysGenerated()
			// A cache that still shows the Secret as it was before the
			// rotation is behind, not the Secret: the pass is retried.
			sc.api.behind = map[string]*corev1.Secret{key.Name: before}
			if result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key}); err != nil || result.RequeueAfter != time.Second {
				t.Fatalf("the pass on a cache behind ended with %v, %+v; want it retried in a second", err, result)
			}
			sc.api.behind = nil
			if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason == v1alpha1.ReasonCALost {
				t.Errorf("on a cache behind, Ready is %+v, want it as it was", ready)
			}

			restored := &corev1.Secret{}
			if err := sc.api.Get(ctx, key, restored); err != nil {
				t.Fatal(err)
			}
			restored.Data, restored.Annotations = before.Data, before.Annotations
			if err := sc.api.Update(ctx, restored); err != nil {
				t.Fatal(err)
			}

			_, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
			if err == nil || !strings.Contains(err.Error(), refusal[phase]) {
				t.Fatalf("the pass ended with %v, want the Secret refused", err)
			}
			if n := pki.KeysGenerated() - keys; n != 0 {
				t.Errorf("the pass generated %d keys, want 0", n)
			}
			after := &corev1.Secret{}
			if err := sc.api.Get(ctx, key, after); err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(after.Data, before.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Error("the Secret put back was rewritten")
			}
			if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonCALost {
				t.Errorf("Ready is %+v, want CALost", ready)
			}
		})
	}
}

// A manager whose cache shows the Cluster from before an abort was recorded
// (Prepared), beside CA Secrets the abort already swapped back (the old CA
// current again, the aborted new one previous), does not take them for
// Prepared's: that would sign every server certificate with the aborted CA.
// The pass is retried, and writes nothing. The same Secret beside a Cluster
// the API server has as read was edited by hand, and is refused.
func TestASecretSwappedByAnAbortIsNotTakenForAnotherPhase(t *testing.T) {
	ctx := context.Background()
	// prepared is a Cluster in Prepared, as the API server has it then.
	prepared := func(t *testing.T) (*settledCluster, *v1alpha1.Cluster) {
		sc := newSettledCluster(t)
		sc.annotate(v1alpha1.OperationStartCARotation)
		sc.statusWritesUntil(v1alpha1.RotationPrepared)
		return sc, sc.cluster()
	}
	swappedBack := func(sc *settledCluster) bool {
		s := getSecret(sc.t, sc.api, sc.key.Namespace, credentials.CASecretName(sc.key.Name, v1alpha1.CARoleClient))
		cas, err := credentials.DecodeCASecret(s)
		return err == nil && cas.Restored()
	}

	t.Run("a cache whose Cluster is behind", func(t *testing.T) {
		sc, before := prepared(t)
		sc.annotate(v1alpha1.OperationAbortCARotation)
		for i := 0; i < 10 && !swappedBack(sc); i++ {
			sc.reconcile()
		}
		if !swappedBack(sc) {
			t.Fatal("the abort did not swap the client CAs back")
		}
		sc.passOnAClusterBehind(before)
	})

	t.Run("edited by hand", func(t *testing.T) {
		sc, c := prepared(t)
		s := getSecret(t, sc.api, sc.key.Namespace, credentials.CASecretName(sc.key.Name, v1alpha1.CARoleClient))
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, v1alpha1.AnnotationAbortedRotation, c.CARotationID())
		if err := sc.api.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		if !swappedBack(sc) {
			t.Fatal("the Secret edited does not read as swapped back")
		}
		_, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
		if err == nil || !strings.Contains(err.Error(), "it was edited by hand") {
			t.Fatalf("the pass ended with %v, want the Secret refused", err)
		}
		if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonCALost {
			t.Errorf("Ready is %+v, want CALost", ready)
		}
	})
}

// A key reissued after a service-account key rotation carries that
// rotation's ID, as a key the rotation staged does, so that kubectl carousel
// certs restore takes a copy of it (a copy without the ID was made before the
// rotation); one reissued while a rotation is under way does not, which would
// say that the rotation had staged its new key.
func TestAReissuedServiceAccountKeyIsMarkedNewerThanTheLastKeyRotation(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		phase v1alpha1.ServiceAccountKeyRotationPhase
		want  string
	}{
		{"", ""},
		{v1alpha1.ServiceAccountKeyCompleted, "2026-11-01T12:00:00Z"},
		{v1alpha1.ServiceAccountKeyPrepared, ""},
	} {
		ctx := context.Background()
		sc := newSettledCluster(t)
		if tc.phase != "" {
			c := sc.cluster()
			c.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{ServiceAccountKey: &v1alpha1.ServiceAccountKeyRotation{
				Phase: tc.phase, LastInitiationTime: &started}}
			if err := sc.api.Status().Update(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		key := client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.ServiceAccountKeySecretName(sc.key.Name)}
		if err := sc.api.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
			t.Fatal(err)
		}
		sc.annotate(v1alpha1.OperationReissueServiceAccountKey)
		sc.reconcile()
		s := &corev1.Secret{}
		if err := sc.api.Get(ctx, key, s); err != nil {
			t.Fatalf("key rotation %q: no key reissued: %v", tc.phase, err)
		}
		if got := s.Annotations[v1alpha1.AnnotationRotation]; got != tc.want {
			t.Errorf("key rotation %q: the reissued key's %s is %q, want %q", tc.phase, v1alpha1.AnnotationRotation, got, tc.want)
		}
	}
}

// A CA Secret put back, once the rotation completed, from a copy made while
// it was Prepared is refused: the old CA it holds as previous, which the
// rotation retired, is not trusted again; nor is a foreign CA taken as
// current beside the recorded one as previous. A cache that shows the
// Secret before the old CA was dropped is behind, not the Secret.
func TestACASecretPutBackFromDuringTheRotationIsRefusedOnceItCompleted(t *testing.T) {
	foreign, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	foreignCA, err := pki.NewCA(pki.CATemplate{CommonName: "foreign", Validity: 24 * time.Hour}, foreign, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	samePair := func(prepared *credentials.CAs) *credentials.CAs { return prepared }
	for name, tc := range map[string]struct {
		putBack func(prepared *credentials.CAs) *credentials.CAs
		// reissued: the status no longer records the role's CA, as after
		// reissue-ca.
		reissued bool
	}{
		"the old CA as previous": {putBack: samePair},
		"a foreign CA as current, the recorded previous": {putBack: func(prepared *credentials.CAs) *credentials.CAs {
			return &credentials.CAs{Current: foreignCA, Previous: prepared.Current}
		}},
		"the old CA as previous, the CA no longer recorded (reissue-ca)": {putBack: samePair, reissued: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			sc := newSettledCluster(t)
			key := client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.CASecretName(sc.key.Name, v1alpha1.CARoleClient)}
			sc.annotate(v1alpha1.OperationStartCARotation)
			sc.statusWritesUntil(v1alpha1.RotationPrepared)
			copied := &corev1.Secret{}
			if err := sc.api.Get(ctx, key, copied); err != nil {
				t.Fatal(err)
			}
			prepared, err := credentials.DecodeCASecret(copied)
			if err != nil || prepared.Previous == nil {
				t.Fatalf("the client CAs of a Prepared rotation: %+v, %v", prepared, err)
			}
			sc.annotate(v1alpha1.OperationCompleteCARotation + v1alpha1.OperationForceSuffix)
			sc.statusWritesUntil(v1alpha1.RotationCompleted)

			sc.api.behind = map[string]*corev1.Secret{key.Name: copied}
			if result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key}); err != nil || result.RequeueAfter != time.Second {
				t.Fatalf("the pass on a cache behind ended with %v, %+v; want it retried in a second", err, result)
			}
			sc.api.behind = nil

			if tc.reissued {
				c := sc.cluster()
				forgetCAs(c, []v1alpha1.CARole{v1alpha1.CARoleClient})
				if err := sc.api.Status().Update(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			data, err := credentials.EncodeCASecretData(tc.putBack(prepared))
			if err != nil {
				t.Fatal(err)
			}
			restored := &corev1.Secret{}
			if err := sc.api.Get(ctx, key, restored); err != nil {
				t.Fatal(err)
			}
			restored.Data = data
			if err := sc.api.Update(ctx, restored); err != nil {
				t.Fatal(err)
			}
			keys := pki.KeysGenerated()
			_, err = sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
			if err == nil || !strings.Contains(err.Error(), "that no rotation keeps: it was put back from a copy made during a rotation") {
				t.Fatalf("the pass ended with %v, want the Secret refused", err)
			}
			if n := pki.KeysGenerated() - keys; n != 0 {
				t.Errorf("the pass generated %d keys, want 0", n)
			}
			bundle := &corev1.ConfigMap{}
			if err := sc.api.Get(ctx, client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.BundleConfigMapName(sc.key.Name, v1alpha1.CARoleClient)}, bundle); err != nil {
				t.Fatal(err)
			}
			if certs, err := pki.ParseCertificates([]byte(bundle.Data[v1alpha1.DataKeyCABundle])); err != nil || len(certs) != 1 || !certs[0].Equal(prepared.Current.Cert) {
				t.Errorf("the client CA bundle holds %d certificates (%v), want the new client CA alone", len(certs), err)
			}
			if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonCALost {
				t.Errorf("Ready is %+v, want CALost", ready)
			}
		})
	}
}

// A CA Secret put back, in Preparing, from a copy made before the rotation,
// while the status does not yet record the rotation's new CA (the passes
// since it was written kept failing after they signed with it), is refused:
// the role's trust bundle still lists that CA, and a second new CA would
// leave what the first signed untrusted. A CA the bundle lists that was
// minted before the rotation started (an aborted one whose keys were deleted
// by hand before a pass rewrote the bundle) is no such CA.
func TestANewCAPutBackBeforeTheStatusRecordedItIsRefused(t *testing.T) {
	ctx := context.Background()
	clientCA := func(sc *settledCluster) client.ObjectKey {
		return client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.CASecretName(sc.key.Name, v1alpha1.CARoleClient)}
	}
	// signedWithTheNewCA is a Cluster whose rotation signed with its new
	// CAs, as the API server has it then, with the status put back as it was
	// before the rotation wrote them (Preparing, its inventory the old CAs),
	// and the client CA Secret as it was before the rotation.
	signedWithTheNewCA := func(t *testing.T) (sc *settledCluster, before, during *corev1.Secret) {
		sc = newSettledCluster(t)
		inventory := sc.cluster().Status.Credentials.CertificateAuthorities
		before = getSecret(t, sc.api, sc.key.Namespace, clientCA(sc).Name)
		sc.annotate(v1alpha1.OperationStartCARotation)
		sc.statusWritesUntil(v1alpha1.RotationPrepared)
		during = getSecret(t, sc.api, sc.key.Namespace, clientCA(sc).Name)
		c := sc.cluster()
		rot := c.CARotation().DeepCopy()
		rot.Phase, rot.LastInitiationFinishedTime = v1alpha1.RotationPreparing, nil
		setCARotation(c, rot)
		c.Status.Credentials.CertificateAuthorities = inventory
		if err := sc.api.Status().Update(ctx, c); err != nil {
			t.Fatal(err)
		}
		return sc, before, during
	}
	putBack := func(t *testing.T, sc *settledCluster, copy *corev1.Secret) {
		s := getSecret(t, sc.api, sc.key.Namespace, clientCA(sc).Name)
		s.Data, s.Annotations = copy.Data, copy.Annotations
		if err := sc.api.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("put back", func(t *testing.T) {
		sc, before, _ := signedWithTheNewCA(t)
		putBack(t, sc, before)
		keys := pki.KeysGenerated()
		_, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
		if err == nil || !strings.Contains(err.Error(), "which this rotation generated") {
			t.Fatalf("the pass ended with %v, want the Secret refused", err)
		}
		if n := pki.KeysGenerated() - keys; n != 0 {
			t.Errorf("the pass generated %d keys, want 0", n)
		}
		after := getSecret(t, sc.api, sc.key.Namespace, clientCA(sc).Name)
		if !maps.EqualFunc(after.Data, before.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Error("the Secret put back was rewritten")
		}
		if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonCALost {
			t.Errorf("Ready is %+v, want CALost", ready)
		}
	})

	t.Run("a cache behind", func(t *testing.T) {
		sc, before, during := signedWithTheNewCA(t)
		sc.api.behind = map[string]*corev1.Secret{clientCA(sc).Name: before}
		versions := func() map[string]string {
			secrets := &corev1.SecretList{}
			if err := sc.api.apiServer.List(ctx, secrets); err != nil {
				t.Fatal(err)
			}
			v := map[string]string{}
			for _, s := range secrets.Items {
				v[s.Name] = s.ResourceVersion
			}
			return v
		}
		written, keys := versions(), pki.KeysGenerated()
		result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
		if err != nil || result.RequeueAfter != time.Second {
			t.Fatalf("the pass on a cache behind ended with %v, %+v; want it retried in a second", err, result)
		}
		if !maps.Equal(versions(), written) {
			t.Error("the pass on a cache behind wrote Secrets")
		}
		if n := pki.KeysGenerated() - keys; n != 0 {
			t.Errorf("the pass on a cache behind generated %d keys, want 0", n)
		}
		sc.api.behind = nil
		sc.reconcile()
		after := getSecret(t, sc.api, sc.key.Namespace, clientCA(sc).Name)
		if !maps.EqualFunc(after.Data, during.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Error("the new CAs changed once the cache caught up")
		}
	})

	t.Run("a cache whose bundle is behind", func(t *testing.T) {
		// The API server's bundle lists the Secret's CA alone (put back
		// with it, say); the cache still shows it with the new one.
		sc, before, _ := signedWithTheNewCA(t)
		putBack(t, sc, before)
		key := client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.BundleConfigMapName(sc.key.Name, v1alpha1.CARoleClient)}
		bundle := &corev1.ConfigMap{}
		if err := sc.api.Get(ctx, key, bundle); err != nil {
			t.Fatal(err)
		}
		stale := bundle.DeepCopy()
		old, err := credentials.DecodeCASecret(before)
		if err != nil {
			t.Fatal(err)
		}
		bundle.Data[v1alpha1.DataKeyCABundle] = string(pki.EncodeCertificates(old.Current.Cert))
		if err := sc.api.Update(ctx, bundle); err != nil {
			t.Fatal(err)
		}
		sc.api.behindConfigMaps = map[string]*corev1.ConfigMap{key.Name: stale}
		keys := pki.KeysGenerated()
		result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
		if err != nil || result.RequeueAfter != time.Second {
			t.Fatalf("the pass on a bundle behind ended with %v, %+v; want it retried in a second", err, result)
		}
		if n := pki.KeysGenerated() - keys; n != 0 {
			t.Errorf("the pass on a bundle behind generated %d keys, want 0", n)
		}
	})

	t.Run("a CA minted before the rotation", func(t *testing.T) {
		sc := newSettledCluster(t)
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		aborted, err := pki.NewCA(pki.CATemplate{CommonName: "aborted", Validity: 24 * time.Hour}, key, time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		bundle := &corev1.ConfigMap{}
		if err := sc.api.Get(ctx, client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.BundleConfigMapName(sc.key.Name, v1alpha1.CARoleClient)}, bundle); err != nil {
			t.Fatal(err)
		}
		bundle.Data[v1alpha1.DataKeyCABundle] += string(pki.EncodeCertificates(aborted.Cert))
		if err := sc.api.Update(ctx, bundle); err != nil {
			t.Fatal(err)
		}
		sc.annotate(v1alpha1.OperationStartCARotation)
		sc.statusWritesUntil(v1alpha1.RotationPrepared)
	})
}

// While both CAs are trusted, a CA Secret of the rotation whose previous CA
// was removed or replaced by hand is refused: the trust bundles would drop
// the CA the servers' certificates chain to, or trust a CA no rotation made,
// which would sign them. A Secret whose previous CA the completion dropped,
// beside a Cluster read from before the completion (a cache whose Clusters
// are behind its Secrets), is retried, and the pass writes nothing.
func TestAPreviousCAChangedByHandDuringTheRotationIsRefused(t *testing.T) {
	ctx := context.Background()
	prepared := func(t *testing.T) *settledCluster {
		sc := newSettledCluster(t)
		sc.annotate(v1alpha1.OperationStartCARotation)
		sc.statusWritesUntil(v1alpha1.RotationPrepared)
		return sc
	}
	clientCA := func(sc *settledCluster) *corev1.Secret {
		return getSecret(sc.t, sc.api, sc.key.Namespace, credentials.CASecretName(sc.key.Name, v1alpha1.CARoleClient))
	}
	foreign := pkitest.NewCA(t, "foreign")
	foreignKey, err := foreign.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, refusal string
		edit          func(data map[string][]byte)
	}{
		{"removed", "it was removed by hand", func(data map[string][]byte) {
			delete(data, credentials.DataKeyPreviousCertificate)
			delete(data, credentials.DataKeyPreviousPrivateKey)
		}},
		{"replaced", "it was replaced by hand", func(data map[string][]byte) {
			data[credentials.DataKeyPreviousCertificate] = pki.EncodeCertificates(foreign.Cert)
			data[credentials.DataKeyPreviousPrivateKey] = foreignKey
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := prepared(t)
			s := clientCA(sc)
			tc.edit(s.Data)
			if err := sc.api.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
			keys := pki.KeysGenerated()
			_, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
			if err == nil || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("the pass ended with %v, want the Secret refused", err)
			}
			if n := pki.KeysGenerated() - keys; n != 0 {
				t.Errorf("the pass generated %d keys, want 0", n)
			}
			if after := clientCA(sc); !maps.EqualFunc(after.Data, s.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Error("the Secret edited was rewritten")
			}
			if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonCALost {
				t.Errorf("Ready is %+v, want CALost", ready)
			}
		})
	}

	t.Run("dropped by the completion, the Cluster read before it", func(t *testing.T) {
		sc := prepared(t)
		before := sc.cluster()
		sc.annotate(v1alpha1.OperationCompleteCARotation)
		dropped := func() bool {
			cas, err := credentials.DecodeCASecret(clientCA(sc))
			return err == nil && cas.Previous == nil
		}
		for i := 0; i < 10 && !dropped(); i++ {
			sc.reconcile()
		}
		if !dropped() {
			t.Fatal("the completion did not drop the previous client CA")
		}
		sc.passOnAClusterBehind(before)
	})
}

// passOnAClusterBehind runs a pass whose cache shows the Cluster as before
// is, and checks that it is retried in a second, writing nothing and
// generating no key.
func (sc *settledCluster) passOnAClusterBehind(before *v1alpha1.Cluster) {
	sc.t.Helper()
	writes, keys := sc.api.writes.Load(), pki.KeysGenerated()
	sc.api.mu.Lock()
	sc.api.staleCluster = before
	sc.api.mu.Unlock()
	result, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key})
	if err != nil || result.RequeueAfter != time.Second {
		sc.t.Fatalf("the pass on a Cluster behind ended with %v, %+v; want it retried in a second", err, result)
	}
	if n := sc.api.writes.Load() - writes; n != 0 {
		sc.t.Errorf("the pass on a Cluster behind made %d writes, want 0", n)
	}
	if n := pki.KeysGenerated() - keys; n != 0 {
		sc.t.Errorf("the pass on a Cluster behind generated %d keys, want 0", n)
	}
}
