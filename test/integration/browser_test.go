package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// The operator's page is tested in a real browser: headless Chromium
// (Debian's chromium package; .ci/run installs it), driven over the
// DevTools protocol by chromedp.

// browserNames are the executables looked up on PATH, in this order.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// browserPath returns a Chromium on PATH, or skips t saying how to get
// one; under RLS_REQUIRE_REDIS=1 (CI) it fails instead.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	why := fmt.Sprintf("no browser on PATH (looked for %s); apt-get install chromium", strings.Join(browserNames, ", "))
	if os.Getenv(redistest.RequireEnv) == "1" {
		t.Fatalf("a browser is required (%s=1): %s", redistest.RequireEnv, why)
	}
	t.Skip("skipped: " + why)
	return ""
}

// newBrowser starts a headless Chromium for the test and returns its
// context; tabs opened from it share the one browser process.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browserPath(t)),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true), // containers' /dev/shm is small
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", browserPath(t), err)
	}
	return bctx
}

// tab is one page open in the browser, with what its console said.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []string // errors and warnings, exceptions
}

// openTab opens url in a new tab of browser, recording the console's
// errors, warnings and uncaught exceptions, and accepting every confirm().
func openTab(t *testing.T, browser context.Context, url string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancel()
	})
	tb := &tab{t: t, ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				tb.mu.Lock()
				tb.console = append(tb.console, m.String()+" ("+m.URL+")")
				tb.mu.Unlock()
			}
		}
	}()
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()
	tb.do(chromedp.Navigate(url))
	return tb
}

// do runs actions in the tab, failing the test on an error.
func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.t.Fatalf("%v\nthe page shows:\n%s", err, tb.text())
	}
}

// eval returns the value of a JavaScript expression in the page.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript expression is true, failing after
// within with what, and the page's text.
func (tb *tab) waitFor(within time.Duration, what, expr string) {
	tb.t.Helper()
	_, err := chromedp.Run(tb.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		tb.t.Fatalf("the page did not show %s within %v: %v\nit shows:\n%s", what, within, err, tb.text())
	}
}

// text is the page's visible text, for a failure's message.
func (tb *tab) text() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// consoleErrors returns the errors, warnings and exceptions the console
// has shown so far.
func (tb *tab) consoleErrors() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.console...)
}

// screenshot saves the whole page as name.png in $RLS_UI_SCREENSHOTS, if
// set (the README's picture is made this way).
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	dir := os.Getenv("RLS_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == '<' || r == '>':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
