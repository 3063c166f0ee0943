// Package browser starts headless Chromium for the examples' tests, driven
// through chromedp (the Chrome DevTools Protocol). It is a library package,
// not a _test.go file, so that the module's requirement on chromedp is built
// by a non-test package (see runtime/gomod_test.go).
//
// Chromium is Debian's package (apt-get install chromium); [Path] finds it.
// [New] skips the test when it is missing, and fails it when
// OUTBOX_TEST_REQUIRE_INTEGRATION=1, as CI sets.
package browser

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// EnvChromium names the environment variable that [Path] reads first: the
// path of a Chromium or Chrome executable.
const EnvChromium = "OUTBOX_TEST_CHROMIUM"

// ErrNotFound is returned by [Path] when no Chromium is installed.
var ErrNotFound = errors.New("browser: no chromium executable (apt-get install chromium, or set " + EnvChromium + ")")

// Path returns the Chromium executable: $OUTBOX_TEST_CHROMIUM, else the
// first of chromium, chromium-browser, google-chrome on PATH.
func Path() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNotFound
}

// New starts a headless Chromium with a new profile in a temporary
// directory and returns a chromedp context for one tab; both end with the
// test. Chromium runs without sandbox (tests run as root in CI), GPU, QUIC,
// first-run pages or any background networking: the machine may have no
// network.
func New(t testing.TB) context.Context {
	t.Helper()
	exe, err := Path()
	if err != nil {
		if os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("Chromium is required (OUTBOX_TEST_REQUIRE_INTEGRATION=1): %v", err)
		}
		t.Skipf("skipping the browser test: %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so a broken installation fails here.
	if err := chromedp.Do(ctx); err != nil {
		if os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("start Chromium %s: %v", exe, err)
		}
		t.Skipf("skipping the browser test: Chromium %s does not start: %v", exe, err)
	}
	return ctx
}
