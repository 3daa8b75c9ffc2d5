package proc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestSelfIsAlive(t *testing.T) {
	me := Self()
	if me.PID != os.Getpid() || me.Host == "" {
		t.Fatalf("Self() = %+v", me)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: Check can only answer Unknown")
	}
	if me.Start == 0 {
		t.Fatalf("Self().Start = 0 with /proc present")
	}
	if got := Check(me); got != Alive {
		t.Fatalf("Check(Self()) = %v, want alive", got)
	}
}

func TestExitedProcessIsGone(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: Check can only answer Unknown")
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := startTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id := Identity{Host: Self().Host, Boot: Self().Boot, NS: Self().NS, PID: cmd.Process.Pid, Start: start}
	if got := Check(id); got != Alive {
		t.Fatalf("running child: Check = %v, want alive", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := Check(id); got != Gone {
		t.Fatalf("reaped child: Check = %v, want gone", got)
	}
}

func TestOfNamesAnotherProcess(t *testing.T) {
	if got := Of(0); !got.IsZero() {
		t.Fatalf("Of(0) = %+v, want the zero Identity", got)
	}
	if got := Of(os.Getpid()); got != Self() {
		t.Fatalf("Of(own pid) = %+v, want Self() %+v", got, Self())
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: Check can only answer Unknown")
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := Of(cmd.Process.Pid)
	me := Self()
	if id.PID != cmd.Process.Pid || id.Host != me.Host || id.Boot != me.Boot || id.NS != me.NS || id.Start == 0 {
		t.Fatalf("Of(child %d) = %+v", cmd.Process.Pid, id)
	}
	if got := Check(id); got != Alive {
		t.Fatalf("running child: Check(Of) = %v, want alive", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := Check(id); got != Gone {
		t.Fatalf("reaped child: Check(Of) = %v, want gone", got)
	}
}

func TestCheckNeverGuessesGone(t *testing.T) {
	me := Self()
	cases := map[string]struct {
		id   Identity
		want State
	}{
		"zero":              {Identity{}, Unknown},
		"other host":        {Identity{Host: me.Host + "-other", Boot: me.Boot, NS: me.NS, PID: 1, Start: 1}, Unknown},
		"no host recorded":  {Identity{PID: me.PID, Start: me.Start}, Unknown},
		"pid reused":        {Identity{Host: me.Host, Boot: me.Boot, NS: me.NS, PID: me.PID, Start: me.Start + 1}, Gone},
		"another boot":      {Identity{Host: me.Host, Boot: "another-boot", NS: me.NS, PID: me.PID, Start: me.Start + 1}, Unknown},
		"another namespace": {Identity{Host: me.Host, Boot: me.Boot, NS: "pid:[1]", PID: me.PID, Start: me.Start + 1}, Unknown},
		"no namespace":      {Identity{Host: me.Host, Boot: me.Boot, PID: me.PID, Start: me.Start + 1}, Unknown},
		"start unknown":     {Identity{Host: me.Host, Boot: me.Boot, NS: me.NS, PID: me.PID}, Unknown},
	}
	if me.Boot == "" || me.Start == 0 || me.NS == "" {
		t.Skip("no /proc on this system")
	}
	for name, c := range cases {
		if got := Check(c.id); got != c.want {
			t.Errorf("%s: Check(%+v) = %v, want %v", name, c.id, got, c.want)
		}
	}
}

func TestParseStartOddCommandNames(t *testing.T) {
	// Field 2 may hold spaces and parentheses; fields count from the last ')'.
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n"
	got, err := parseStart([]byte(line))
	if err != nil || got != 987654 {
		t.Fatalf("parseStart = %d, %v; want 987654", got, err)
	}
	for _, bad := range []string{"4242 no-parens S 1", "4242 (x) S 1 2 3"} {
		if _, err := parseStart([]byte(bad)); err == nil {
			t.Errorf("parseStart(%q) accepted a malformed line", bad)
		}
	}
	if _, err := startTime(-1); err == nil {
		t.Fatal("startTime(-1) found a process")
	}
}

// envCheckIdentity, set in a child, holds an Identity as JSON: the child
// prints what Check says of it and exits.
const envCheckIdentity = "SBXDB_PROC_CHECK_IDENTITY"

func TestMain(m *testing.M) {
	if s := os.Getenv(envCheckIdentity); s != "" {
		var id Identity
		if err := json.Unmarshal([]byte(s), &id); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(Check(id))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A process in another pid namespace (a container beside this one, with
// the same host name and kernel) has a pid this process cannot look up:
// Check must not call it gone.
func TestProcessInAnotherPIDNamespaceIsNotGone(t *testing.T) {
	me := Self()
	if me.Boot == "" || me.Start == 0 || me.NS == "" {
		t.Skip("no /proc on this system")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare(1) is not installed: cannot make a pid namespace")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	start, err := startTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	live := Identity{Host: me.Host, Boot: me.Boot, NS: me.NS, PID: cmd.Process.Pid, Start: start}
	b, _ := json.Marshal(live)
	child := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envCheckIdentity+"="+string(b))
	out, err := child.CombinedOutput()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("unshare --pid failed in CI: %v: %s", err, out)
		}
		t.Skipf("cannot make a pid namespace here (needs root): %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != Unknown.String() {
		t.Fatalf("from another pid namespace, Check(live pid %d) = %s, want unknown", live.PID, got)
	}
}

// A process of this host in another pid namespace is named as such: its
// pid there names another process here, or none. An identity recorded
// without a namespace, or of another boot or host, reads as a pid.
func TestStringNamesAnotherNamespace(t *testing.T) {
	me := Self()
	if me.Boot == "" || me.NS == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no /proc in CI: the boot id and pid namespace are unknown")
		}
		t.Skip("no /proc on this system: namespaces are unknown, every identity reads as a pid")
	}
	cases := []struct {
		id   Identity
		want string
	}{
		{Identity{Host: me.Host, Boot: me.Boot, NS: "pid:[1]", PID: 1, Start: 9}, "a process in another pid namespace on " + me.Host + " (pid 1 there)"},
		{Identity{Host: me.Host, Boot: me.Boot, NS: me.NS, PID: 7}, "pid 7 on " + me.Host},
		{Identity{Host: me.Host, Boot: me.Boot, PID: 7}, "pid 7 on " + me.Host},                  // recorded without a namespace
		{Identity{Host: me.Host, PID: 7}, "pid 7 on " + me.Host},                                 // nor a boot
		{Identity{Host: me.Host, Boot: "another", NS: "pid:[1]", PID: 1}, "pid 1 on " + me.Host}, // another boot
		{Identity{Host: me.Host + "-b", Boot: me.Boot, NS: "pid:[1]", PID: 1}, "pid 1 on " + me.Host + "-b"},
		{Identity{PID: 3}, "pid 3"},
		{Identity{}, "an unknown process"},
	}
	for _, c := range cases {
		if got := c.id.String(); got != c.want {
			t.Errorf("%+v: String() = %q, want %q", c.id, got, c.want)
		}
		if got, want := c.id.OtherNamespace(), strings.HasPrefix(c.want, "a process in another"); got != want {
			t.Errorf("%+v: OtherNamespace() = %v, want %v", c.id, got, want)
		}
	}
}
