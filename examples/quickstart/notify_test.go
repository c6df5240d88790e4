package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/webhook"
)

// message is one delivery attempt of the scene's kind: a slack message of
// one part.
func message(t *testing.T, id, recipient, body string) transport.Message {
	t.Helper()
	rc, err := transport.NewRecipient(recipient)
	require.NoError(t, err)
	return transport.Message{IntentID: id, Attempt: 1, Channel: "slack", Recipient: rc,
		Parts: []transport.Part{{Name: "text", ContentType: "text/plain", Body: []byte(body)}}}
}

// startWebhook starts a receiver and, in process, the real webhook
// transport posting to it with the same secret.
func startWebhook(t *testing.T) (*receiver, transport.Transport, string) {
	t.Helper()
	secret := randomHex(32)
	rcv, err := startReceiver(secret)
	require.NoError(t, err)
	t.Cleanup(rcv.close)
	wh, err := webhook.New(map[string]string{"url": rcv.url(), "secret": secret}, transport.Env{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = wh.Close() })
	return rcv, wh, secret
}

// The receiver records what the real webhook transport posts, by intent
// id, and refuses (and counts) any request whose signature does not verify.
func TestReceiverVerifiesAndCounts(t *testing.T) {
	rcv, wh, secret := startWebhook(t)
	ctx := context.Background()

	r := wh.Deliver(ctx, message(t, "intent-1", "ada@example.com", "*Hello Ada,*\nyour account A-1 is ready."))
	assert.Equal(t, transport.Accepted, r.Outcome, "%+v", r)
	r = wh.Deliver(ctx, message(t, "intent-2", "bea@example.com", "*Hallo Bea,*"))
	assert.Equal(t, transport.Accepted, r.Outcome, "%+v", r)
	r = wh.Deliver(ctx, message(t, "intent-1", "ada@example.com", "*Hello Ada,*")) // a resend
	assert.Equal(t, transport.Accepted, r.Outcome, "%+v", r)
	assert.Equal(t, "*Hello Ada,*", firstLine(rcv.got("intent-1")))
	assert.Equal(t, "*Hallo Bea,*", firstLine(rcv.got("intent-2")))

	// Another secret, no header, a stale timestamp: forged, never recorded.
	other, err := webhook.New(map[string]string{"url": rcv.url(), "secret": randomHex(32)}, transport.Env{})
	require.NoError(t, err)
	defer other.Close()
	r = other.Deliver(ctx, message(t, "intent-3", "eve@example.com", "forged"))
	assert.Equal(t, transport.RejectedDefinite, r.Outcome)
	assert.Equal(t, "http-401", r.Code)
	body := []byte(`{"intent_id":"intent-4","attempt":1,"channel":"slack","recipient":"eve@example.com","parts":[]}`)
	for name, sig := range map[string]string{
		"none":  "",
		"stale": webhook.Sign([]byte(secret), time.Now().Add(-2*time.Minute).Unix(), body),
		"other": webhook.Sign([]byte(secret), time.Now().Unix(), []byte(`{"intent_id":"intent-5"}`)),
	} {
		assert.Equal(t, http.StatusUnauthorized, post(t, rcv.url(), sig, body), name)
	}
	// Signed, but not a document: refused, not forged.
	junk := []byte(`not json`)
	assert.Equal(t, http.StatusBadRequest, post(t, rcv.url(), webhook.Sign([]byte(secret), time.Now().Unix(), junk), junk))

	per, forged := rcv.tally()
	assert.Equal(t, map[string]int{"intent-1": 2, "intent-2": 1}, per)
	assert.Equal(t, 4, forged)
}

func post(t *testing.T, url, sig string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	require.NoError(t, err)
	if sig != "" {
		req.Header.Set(webhook.SignatureHeader, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A hold@ recipient's request is held until its caller goes away: the
// transport cannot know whether it was acted on (Indeterminate), and the
// receiver recorded it once.
func TestReceiverHoldsTheCall(t *testing.T) {
	rcv, wh, _ := startWebhook(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan transport.Receipt, 1)
	go func() { done <- wh.Deliver(ctx, message(t, "intent-h", holdPrefix+"example.com", "*Hello Carl,*")) }()
	select {
	case id := <-rcv.entered:
		assert.Equal(t, "intent-h", id)
	case <-time.After(10 * time.Second):
		t.Fatal("the held request never reached the receiver")
	}
	select {
	case r := <-done:
		t.Fatalf("the held call ended while held: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	cancel() // the caller goes away, as a killed plugin does
	r := <-done
	assert.Equal(t, transport.Indeterminate, r.Outcome, "%+v", r)
	assert.Len(t, rcv.got("intent-h"), 1)
}

func TestParseParent(t *testing.T) {
	ppid, err := parseParent("4242 (webhook) S 4100 4242 4100 0 -1 4194560 281 0 0 0\n")
	require.NoError(t, err)
	assert.Equal(t, 4100, ppid)
	ppid, err = parseParent("77 (a) b (c)) R 12 77 12 0")
	require.NoError(t, err)
	assert.Equal(t, 12, ppid, "a comm with spaces and parens")
	for _, bad := range []string{"", "77 (a", "77 (a) R"} {
		_, err := parseParent(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// pluginProcs finds a process by its executable's path and parent, as the
// scene finds each replica's webhook plugin; the kill helper's target is
// exactly that child.
func TestPluginProcs(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	exe := filepath.Join(t.TempDir(), "webhook")
	require.NoError(t, copyFile(sleep, exe))
	assert.Empty(t, pluginProcs(exe), "nothing runs it yet")

	cmd := exec.Command(exe, "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	assert.Equal(t, map[int]int{pid: os.Getpid()}, pluginProcs(exe))
	assert.Equal(t, map[int]int{pid: os.Getpid()}, pluginProcs(exe, 1, os.Getpid()))
	assert.Empty(t, pluginProcs(exe, 1), "a child of another parent")
	assert.Empty(t, pluginProcs(sleep+".other", os.Getpid()), "another executable")

	d := &demo{replicas: []*replica{{name: "A", cmd: &exec.Cmd{Process: &os.Process{Pid: os.Getpid()}}}}}
	got, err := d.replicaPlugins(exe)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"A": pid}, got)
	assert.Equal(t, "A pid "+strconv.Itoa(pid), pidList(got))

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	_ = cmd.Wait()
	assert.Empty(t, pluginProcs(exe), "killed and reaped")
	_, err = d.replicaPlugins(exe)
	assert.Error(t, err, "a replica without its plugin")
}

// reapPlugins ends what a killed replica's plugin left running.
func TestReapPlugins(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	exe := filepath.Join(t.TempDir(), "webhook")
	require.NoError(t, copyFile(sleep, exe))
	cmd := exec.Command(exe, "30")
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	start := time.Now()
	reapPlugins(exe)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("reapPlugins left the process running")
	}
	assert.Less(t, time.Since(start), 5*time.Second)
}

// respCommand speaks RESP as the app user: AUTH, then the command; an
// error reply is an error, XRANGE's array header is the entry count.
func TestRespCommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []string, 4)
	go func() {
		replies := []string{"*3\r\n", "-NOPERM no permissions\r\n", "$-1\r\n"}
		for _, reply := range replies {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(c)
			var cmds []string
			for range 2 {
				cmds = append(cmds, strings.Join(readCommand(r), " "))
			}
			got <- cmds
			_, _ = c.Write([]byte("+OK\r\n" + reply))
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	n, err := xrangeCount(addr, "pw", "ca:demo:dev:q")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, []string{"AUTH " + appUser + " pw", "XRANGE ca:demo:dev:q - +"}, <-got)
	_, err = respCommand(addr, "pw", "XADD", "s", "*", "i", "x")
	assert.ErrorContains(t, err, "NOPERM")
	<-got
	_, err = xrangeCount(addr, "pw", "s")
	assert.ErrorContains(t, err, "XRANGE answered")
}

// TestXrangeRaw: the whole reply up to the connection's close, after
// AUTH, XRANGE and QUIT in one write; a refused XRANGE is an error.
func TestXrangeRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []string, 2)
	go func() {
		for _, reply := range []string{"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\np\r\n$6\r\nsealed\r\n+OK\r\n", "-NOPERM no\r\n+OK\r\n"} {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(c)
			var cmds []string
			for range 3 {
				cmds = append(cmds, strings.Join(readCommand(r), " "))
			}
			got <- cmds
			_, _ = c.Write([]byte("+OK\r\n" + reply))
			_ = c.Close()
		}
	}()
	n, raw, err := xrangeRaw(ln.Addr().String(), "pw", "s")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Contains(t, string(raw), "sealed")
	assert.Equal(t, []string{"AUTH " + appUser + " pw", "XRANGE s - +", "QUIT"}, <-got)
	_, _, err = xrangeRaw(ln.Addr().String(), "pw", "s")
	assert.ErrorContains(t, err, "XRANGE s answered")
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) []string {
	l, _ := r.ReadString('\n')
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "*")))
	out := make([]string, 0, n)
	for range n {
		_, _ = r.ReadString('\n') // $len
		a, _ := r.ReadString('\n')
		out = append(out, strings.TrimSuffix(a, "\r\n"))
	}
	return out
}

func TestLookupEnvLaterWins(t *testing.T) {
	d := &demo{env: []string{"A=1", "B=x=y", "A=2"}}
	v, ok := d.lookupEnv("A")
	assert.True(t, ok)
	assert.Equal(t, "2", v, "as a process started with this environment sees it")
	v, ok = d.lookupEnv("B")
	assert.True(t, ok)
	assert.Equal(t, "x=y", v)
	_, ok = d.lookupEnv("C")
	assert.False(t, ok)
}

func TestShortKey(t *testing.T) {
	assert.Equal(t, "ca:demo:dev:notify:intents:…:stream",
		shortKey("ca:demo:dev:notify:intents:hv0:kv1:{71f95c3e}:71f95c3e8aa7:stream"))
	assert.Equal(t, "ca:demo:dev:x", shortKey("ca:demo:dev:x"))
}
