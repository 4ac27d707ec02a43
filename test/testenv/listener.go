package testenv

import (
	"encoding/json"
	"io"
	"net/http"
)

// Get fetches a path of a daemon's listener at addr ("" while it does not answer).
func Get(addr, path string) string {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// Cycles is how many cycles the daemon at addr has completed, by its /readyz (-1 while it does not
// answer).
func Cycles(addr string) int {
	var r struct {
		Cycles int `json:"cycles"`
	}
	if json.Unmarshal([]byte(Get(addr, "/readyz")), &r) != nil {
		return -1
	}
	return r.Cycles
}
