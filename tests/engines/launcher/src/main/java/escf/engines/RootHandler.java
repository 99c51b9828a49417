package escf.engines;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;

/**
 * Serves {@code GET /} (and {@code HEAD /}) on Elasticsearch 8.x and 9.x
 * nodes started from Maven Central's jars.
 *
 * <p>From 8.x the root endpoint lives in the rest-root module, which Elastic
 * does not publish to Maven Central; without it a client's first request
 * answers 405. This handler gives the same fields from the node's own
 * {@code Build}, settings and cluster state, so a client can read the
 * version. It is the only answer of these nodes that is not the engine's
 * own (docs/COMPATIBILITY.md says so; the golden responses leave it out).
 * Elasticsearch 7.17 has the endpoint in the server and is left alone.
 */
final class RootHandler {
    private RootHandler() {}

    static void installIfMissing(Object node) throws Exception {
        ClassLoader cl = node.getClass().getClassLoader();
        for (String served : new String[] {
                "org.elasticsearch.rest.action.RestMainAction", // 7.x: in the server
                "org.elasticsearch.rest.root.MainRestPlugin"}) { // 8.x+: the module, if someone adds it
            try {
                Class.forName(served, false, cl);
                return; // GET / is there: nothing to fill in
            } catch (ClassNotFoundException e) {
                // as expected for 8.x and 9.x jars from Maven Central
            }
        }
        Class<?> restController = Class.forName("org.elasticsearch.rest.RestController");
        Class<?> restHandler = Class.forName("org.elasticsearch.rest.RestHandler");
        Class<?> route = Class.forName("org.elasticsearch.rest.RestHandler$Route");
        Class<?> method = Class.forName("org.elasticsearch.rest.RestRequest$Method");
        Class<?> injectorClass = Class.forName("org.elasticsearch.injection.guice.Injector");
        Object injector = node.getClass().getMethod("injector").invoke(node);
        Method getInstance = injectorClass.getMethod("getInstance", Class.class);
        Object controller = getInstance.invoke(injector, restController);
        Object clusterService = getInstance.invoke(injector, Class.forName("org.elasticsearch.cluster.service.ClusterService"));
        Object settings = node.getClass().getMethod("settings").invoke(node);

        Object handler = Proxy.newProxyInstance(cl, new Class<?>[] {restHandler}, new Handler(clusterService, settings));
        Method register = restController.getMethod("registerHandler", route, restHandler);
        for (String m : new String[] {"GET", "HEAD"}) {
            @SuppressWarnings({"unchecked", "rawtypes"})
            Object verb = Enum.valueOf((Class<Enum>) method, m);
            register.invoke(controller, route.getConstructor(method, String.class).newInstance(verb, "/"), handler);
        }
    }

    private static final class Handler implements InvocationHandler {
        private final Object clusterService;
        private final Object settings;

        Handler(Object clusterService, Object settings) {
            this.clusterService = clusterService;
            this.settings = settings;
        }

        @Override
        public Object invoke(Object proxy, Method m, Object[] args) throws Throwable {
            switch (m.getName()) {
                case "handleRequest":
                    respond(args[0], args[1]);
                    return null;
                case "getName":
                    return "escf_root_action";
                case "toString":
                    return "RootHandler";
                case "hashCode":
                    return System.identityHashCode(proxy);
                case "equals":
                    return proxy == args[0];
                default:
                    if (m.isDefault()) {
                        return InvocationHandler.invokeDefault(proxy, m, args);
                    }
                    throw new UnsupportedOperationException(m.toString());
            }
        }

        private void respond(Object request, Object channel) throws Exception {
            Class<?> build = Class.forName("org.elasticsearch.Build");
            Object b = build.getMethod("current").invoke(null);
            Object state = clusterService.getClass().getMethod("state").invoke(clusterService);
            Object metadata = state.getClass().getMethod("metadata").invoke(state);
            Object clusterName = state.getClass().getMethod("getClusterName").invoke(state);
            Method get = settings.getClass().getMethod("get", String.class);
            StringBuilder j = new StringBuilder(512);
            j.append("{\"name\":").append(quote((String) get.invoke(settings, "node.name")));
            j.append(",\"cluster_name\":").append(quote((String) clusterName.getClass().getMethod("value").invoke(clusterName)));
            j.append(",\"cluster_uuid\":").append(quote((String) metadata.getClass().getMethod("clusterUUID").invoke(metadata)));
            j.append(",\"version\":{\"number\":").append(quote(call(build, b, "version")));
            j.append(",\"build_flavor\":").append(quote(call(build, b, "flavor")));
            Object type = build.getMethod("type").invoke(b);
            j.append(",\"build_type\":").append(quote((String) type.getClass().getMethod("displayName").invoke(type)));
            j.append(",\"build_hash\":").append(quote(call(build, b, "hash")));
            j.append(",\"build_date\":").append(quote(call(build, b, "date")));
            j.append(",\"build_snapshot\":").append(build.getMethod("isSnapshot").invoke(b));
            Object lucene = Class.forName("org.apache.lucene.util.Version").getField("LATEST").get(null);
            j.append(",\"lucene_version\":").append(quote(lucene.toString()));
            j.append(",\"minimum_wire_compatibility_version\":").append(quote(call(build, b, "minWireCompatVersion")));
            j.append(",\"minimum_index_compatibility_version\":").append(quote(call(build, b, "minIndexCompatVersion")));
            j.append("},\"tagline\":\"You Know, for Search\"}");

            Class<?> status = Class.forName("org.elasticsearch.rest.RestStatus");
            @SuppressWarnings({"unchecked", "rawtypes"})
            Object ok = Enum.valueOf((Class<Enum>) status, "OK");
            Object verb = request.getClass().getMethod("method").invoke(request);
            String body = verb.toString().equals("HEAD") ? "" : j.toString();
            Class<?> restResponse = Class.forName("org.elasticsearch.rest.RestResponse");
            Object resp = restResponse.getConstructor(status, String.class, String.class)
                    .newInstance(ok, "application/json; charset=UTF-8", body);
            Class<?> restChannel = Class.forName("org.elasticsearch.rest.RestChannel");
            restChannel.getMethod("sendResponse", restResponse).invoke(channel, resp);
        }

        private static String call(Class<?> c, Object o, String name) throws Exception {
            return String.valueOf(c.getMethod(name).invoke(o));
        }
    }

    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> {
                    if (ch < 0x20) {
                        b.append(String.format("\\u%04x", (int) ch));
                    } else {
                        b.append(ch);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
