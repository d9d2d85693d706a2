package containeropts

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// masterServiceNamespace holds the "kubernetes" service, whose variables
// every container gets.
const masterServiceNamespace = v1.NamespaceDefault

// serviceEnv is the service variables of a pod's containers: the
// kubernetes service always, and with enableServiceLinks (the default)
// every service of the pod's namespace, as FOO_SERVICE_HOST,
// FOO_SERVICE_PORT and the Docker-link style FOO_PORT_... variables.
func (o *Provider) serviceEnv(pod *v1.Pod) map[string]string {
	out := map[string]string{}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	if links && pod.Namespace != masterServiceNamespace {
		for _, s := range o.objects.Services(pod.Namespace) {
			addServiceEnv(out, s)
		}
	}
	for _, s := range o.objects.Services(masterServiceNamespace) {
		if s.Name == "kubernetes" || (links && pod.Namespace == masterServiceNamespace) {
			addServiceEnv(out, s)
		}
	}
	return out
}

func addServiceEnv(env map[string]string, s *v1.Service) {
	ip := s.Spec.ClusterIP
	if ip == "" || ip == v1.ClusterIPNone || len(s.Spec.Ports) == 0 {
		return
	}
	name := envName(s.Name)
	env[name+"_SERVICE_HOST"] = ip
	env[name+"_SERVICE_PORT"] = strconv.Itoa(int(s.Spec.Ports[0].Port))
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			env[name+"_SERVICE_PORT_"+envName(p.Name)] = strconv.Itoa(int(p.Port))
		}
	}
	first := s.Spec.Ports[0]
	env[name+"_PORT"] = fmt.Sprintf("%s://%s:%d", strings.ToLower(string(protocol(first))), ip, first.Port)
	for _, p := range s.Spec.Ports {
		proto := protocol(p)
		prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(string(proto)))
		env[prefix] = fmt.Sprintf("%s://%s:%d", strings.ToLower(string(proto)), ip, p.Port)
		env[prefix+"_PROTO"] = strings.ToLower(string(proto))
		env[prefix+"_PORT"] = strconv.Itoa(int(p.Port))
		env[prefix+"_ADDR"] = ip
	}
}

func protocol(p v1.ServicePort) v1.Protocol {
	if p.Protocol == "" {
		return v1.ProtocolTCP
	}
	return p.Protocol
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
