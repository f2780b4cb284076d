package e2e_test

import (
	_ "github.com/chromedp/chromedp"
	_ "go.uber.org/goleak"
)
