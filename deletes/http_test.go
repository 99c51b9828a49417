package deletes_test

import (
	"net/http"
	"strings"
)

var httpClient = &http.Client{}

func newRequest(method, url, body string) (*http.Request, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	ct := "application/json"
	if strings.HasSuffix(url, "/_bulk") {
		ct = "application/x-ndjson"
	}
	req.Header.Set("Content-Type", ct)
	return req, nil
}
