package integration

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rlqsclient"
)

// hostile is a descriptor value a caller might send to inject markup: the
// page must show it as text.
const hostile = "<b>x</b>"

// TestOperatorPage opens the admin address's page in headless Chromium, on
// the memory store, Redis exact and local-first, and checks what it shows
// after traffic, that its controls work and are reachable by keyboard, that
// a caller's value is text, and that the console stays clean.
func TestOperatorPage(t *testing.T) {
	browser := newBrowser(t)
	stores := []struct {
		name string
		args func(t *testing.T) ([]string, *redistest.Server)
	}{
		{"Memory", func(*testing.T) ([]string, *redistest.Server) { return nil, nil }},
		{"RedisExact", func(t *testing.T) ([]string, *redistest.Server) {
			srv := redistest.Start(t)
			return []string{"-store", "redis", "-redis-url", srv.URL()}, srv
		}},
		{"LocalFirst", func(t *testing.T) ([]string, *redistest.Server) {
			srv := redistest.Start(t)
			return []string{"-store", "redis", "-redis-url", srv.URL(), "-sync-interval", "1s"}, srv
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			args, redis := s.args(t)
			admin := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
			p := launch(t, "", admin, append([]string{"-config", "../../config"}, args...)...)
			tb := openTab(t, browser, "http://"+admin+"/")
			shot := "operator-page-" + strings.ToLower(s.name)
			if s.name == "Memory" {
				shot = "operator-page"
			}
			checkPage(t, tb, p, shot)
			if redis != nil {
				redis.Stop()
				tb.waitFor(15*time.Second, "the store-down banner", `!document.getElementById("banner").hidden && document.getElementById("banner").textContent.includes("Store down")`)
				tb.waitFor(5*time.Second, "the config while the store is down", `document.querySelector('#limits-body [data-domain="api"]') !== null`)
				tb.screenshot("operator-page-store-down-" + strings.ToLower(s.name))
			}
			if errs := tb.consoleErrors(); len(errs) > 0 {
				t.Errorf("the console shows:\n%s", strings.Join(errs, "\n"))
			}
			if redis == nil {
				p.stop(t) // the browser's console now shows refused connections
				tb.waitFor(10*time.Second, "the banner of a service that does not answer", `document.getElementById("banner").textContent.includes("The service does not answer")`)
			}
		})
	}
}

// checkPage runs the page's checks against a running binary p, then
// saves a screenshot named shot (with RLS_UI_SCREENSHOTS).
func checkPage(t *testing.T, tb *tab, p *process, shot string) {
	t.Helper()
	// The service and the config.
	tb.waitFor(10*time.Second, "the service", `document.getElementById("service-facts").textContent.includes("Uptime")`)
	tb.waitFor(5*time.Second, "the domain api with its limits", `(() => {
		const d = document.querySelector('#limits-body [data-domain="api"]');
		return d !== null && d.textContent.includes("trades_per_user") && d.querySelector("svg polyline") !== null })()`)

	// Refused traffic, from a caller whose value is markup.
	refused := refuseTraffic(t, p)
	tb.waitFor(10*time.Second, "the refused bucket user="+hostile+" with its count "+strconv.Itoa(refused), `[...document.querySelectorAll("#refused-body tbody tr")].some(r =>
		r.cells[1].textContent === `+js("user="+hostile)+` && r.cells[3].textContent === "`+strconv.Itoa(refused)+`")`)
	if n := eval[int](tb, `document.querySelectorAll("main b").length`); n != 0 {
		t.Errorf("the page made %d <b> elements of a caller's value", n)
	}

	// RLQS: an emulated Envoy reporting alice's requests.
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	envoy := rlqsclient.Start(context.Background(), conn, rlqsclient.Options{Domain: "api", ReportInterval: time.Second})
	defer envoy.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for tick := time.NewTicker(50 * time.Millisecond); ; {
			select {
			case <-stop:
				tick.Stop()
				return
			case <-tick.C:
				envoy.Request(rlqsAlice)
			}
		}
	}()
	tb.waitFor(10*time.Second, "the RLQS stream of the domain api", `[...document.querySelectorAll("#rlqs-body table:first-of-type tbody tr")].some(r => r.cells[1].textContent === "api")`)
	tb.waitFor(10*time.Second, "an RLQS level with its subscriber", `[...document.querySelectorAll("#rlqs-body table:nth-of-type(2) tbody tr")].some(r => Number(r.cells[1].textContent) >= 1)`)

	// Why: the explain form, filled in and sent by keyboard.
	tb.do(
		chromedp.SendKeys("#explain-domain", "api"),
		chromedp.SendKeys(`#explain-entries li:first-child input[name=key]`, "client"),
		chromedp.SendKeys(`#explain-entries li:first-child input[name=value]`, "abuser"+kb.Enter),
	)
	tb.waitFor(10*time.Second, "the explain form's answer", `(() => { const r = document.getElementById("explain-result").textContent;
		return r.includes("Answer: OVER_LIMIT") && r.includes("client=abuser: OVER_LIMIT") })()`)

	// The reset button, pressed by keyboard (its confirm() accepted by the
	// tab).
	tb.do(chromedp.Focus(`#refused-body button.reset:not([disabled])`), chromedp.KeyEvent(kb.Enter))
	tb.waitFor(10*time.Second, "the reset's answer", `document.getElementById("refused-result").textContent === `+js("Reset api [user="+hostile+"]."))

	checkKeyboard(t, tb)
	if other := eval[[]string](tb, `performance.getEntriesByType("resource").map((e) => e.name).filter((u) => !u.startsWith(location.origin + "/"))`); len(other) > 0 {
		t.Errorf("the page loaded from another origin: %q", other)
	}

	if os.Getenv("RLS_UI_SCREENSHOTS") != "" {
		if shot == "operator-page" {
			pictureTraffic(t, p, 12*time.Second) // for charts worth a picture
		}
		eval[bool](tb, `(document.activeElement && document.activeElement.blur(), true)`)
		tb.screenshot(shot)
	}
}

// refuseTraffic sends user=hostile past its 60-request bucket on the gRPC
// port and returns how many calls were refused.
func refuseTraffic(t *testing.T, p *process) int {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	refused := 0
	for range 70 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.ShouldRateLimit(ctx, request([]string{"user=" + hostile}))
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("70 calls in a bucket of 60: none refused")
	}
	return refused
}

// pictureTraffic sends, for d, a few limits' worth of steady traffic,
// some of it refused, so that a screenshot's charts have a shape.
func pictureTraffic(t *testing.T, p *process, d time.Duration) {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	search := request([]string{"user=bob"})
	search.Domain = "search"
	calls := []struct {
		req   *rlsv3.RateLimitRequest
		every int // ticks of 50 ms
	}{
		{request([]string{"user=alice", "action=trade"}), 6},
		{request([]string{"user=carol", "action=read"}), 3},
		{request([]string{"path=/admin/users"}), 5},
		{search, 1},
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		<-tick.C
		for _, c := range calls {
			if i%c.every == 0 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				client.ShouldRateLimit(ctx, c.req)
				cancel()
			}
		}
	}
}

// controlsJS lists the page's controls by name, as Tab should reach them.
const controlsJS = `(() => {
	const name = (e) => e.id || e.getAttribute("aria-label") || e.textContent.trim();
	window.controlName = name;
	const sel = 'a[href], button:not([disabled]), input, select, textarea, summary, [tabindex]:not([tabindex="-1"])';
	return [...document.querySelectorAll(sel)].filter((e) => e.getClientRects().length > 0).map(name);
})()`

// checkKeyboard presses Tab through the page and fails on a control that
// no Tab reaches or that shows no focus outline.
func checkKeyboard(t *testing.T, tb *tab) {
	t.Helper()
	controls := eval[[]string](tb, controlsJS)
	if len(controls) < 5 {
		t.Fatalf("only %d controls found: %q", len(controls), controls)
	}
	eval[bool](tb, `(document.activeElement && document.activeElement.blur(), true)`)
	seen := map[string]bool{}
	for range len(controls) + 10 {
		tb.do(chromedp.KeyEvent("\t"))
		focused := eval[[]string](tb, `(() => { const e = document.activeElement;
			if (!e || e === document.body) return ["", ""];
			return [window.controlName(e), getComputedStyle(e).outlineStyle] })()`)
		if focused[0] != "" && focused[1] == "none" {
			t.Errorf("%q has the focus but no visible outline", focused[0])
		}
		seen[focused[0]] = true
	}
	for _, c := range controls {
		if !seen[c] {
			t.Errorf("no Tab reaches the control %q (reached: %v)", c, seen)
		}
	}
}
