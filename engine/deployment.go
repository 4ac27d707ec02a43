package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// deployment is the part of a stack's exported state the engine reads: resources and the operations a
// killed run left pending.
type deployment struct {
	Resources []struct {
		URN     string         `json:"urn"`
		Type    string         `json:"type"`
		ID      string         `json:"id"`
		Outputs map[string]any `json:"outputs"`
	} `json:"resources"`
	Pending []struct {
		Type     string `json:"type"`
		Resource struct {
			URN string `json:"urn"`
		} `json:"resource"`
	} `json:"pending_operations"`
}

// exportDeployment reads a stack's state (one Pulumi CLI run).
func exportDeployment(ctx context.Context, st auto.Stack) (*deployment, error) {
	dep, err := st.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("export stack %s: %w", st.Name(), err)
	}
	d := &deployment{}
	if len(dep.Deployment) > 0 {
		if err := json.Unmarshal(dep.Deployment, d); err != nil {
			return nil, fmt.Errorf("read deployment of %s: %w", st.Name(), err)
		}
	}
	return d, nil
}
