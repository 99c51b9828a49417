package escf.engines;

import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

/**
 * Runs ONE real Elasticsearch or OpenSearch node in this JVM, from the jars
 * Maven Central publishes (the server, its HTTP transport plugin and the test
 * framework's MockNode, which starts a node with plugins from the classpath).
 *
 * <p>The same class serves every engine: it reaches the engine's classes by
 * reflection, so one launcher jar runs on each engine's classpath.
 *
 * <pre>
 * java -cp launcher.jar:&lt;engine jars&gt; escf.engines.Launcher \
 *   --product opensearch --home DIR --setting node.name=n0 --setting http.port=9200 ...
 * </pre>
 *
 * <p>Every {@code --setting key=value} becomes a node setting; the Go side
 * (tests/engines) chooses them. The launcher prints {@code escf-engine:
 * started} on stdout once the node has started (HTTP bound), and closes
 * the node on SIGTERM/SIGINT.
 */
public final class Launcher {
    private Launcher() {}

    /** HTTP transport plugins, newest first; the first found is loaded. */
    private static final Map<String, List<String>> HTTP_PLUGINS = Map.of(
            "opensearch", List.of(
                    "org.opensearch.transport.Netty4ModulePlugin", // 3.x
                    "org.opensearch.transport.Netty4Plugin"), // 2.x
            "elasticsearch", List.of(
                    "org.elasticsearch.transport.netty4.Netty4Plugin", // 8.x, 9.x
                    "org.elasticsearch.transport.Netty4Plugin")); // 7.17

    public static void main(String[] args) throws Exception {
        String product = null;
        Path home = null;
        Map<String, String> settings = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (i + 1 >= args.length) {
                usage("missing value after " + a);
            }
            String v = args[++i];
            switch (a) {
                case "--product" -> product = v;
                case "--home" -> home = Path.of(v);
                case "--setting" -> {
                    int eq = v.indexOf('=');
                    if (eq <= 0) {
                        usage("--setting wants key=value, got " + v);
                    }
                    settings.put(v.substring(0, eq), v.substring(eq + 1));
                }
                default -> usage("unknown argument " + a);
            }
        }
        if (product == null || !HTTP_PLUGINS.containsKey(product)) {
            usage("--product must be opensearch or elasticsearch");
        }
        if (home == null) {
            usage("--home is required");
        }
        Files.createDirectories(home.resolve("config"));
        settings.putIfAbsent("path.home", home.toString());
        settings.putIfAbsent("path.data", home.resolve("data").toString());
        settings.putIfAbsent("path.logs", home.resolve("logs").toString());

        if (Boolean.getBoolean("escf.exitOnStdinEof")) {
            watchParent();
        }
        String pkg = "org." + product;
        configureLogging(pkg);
        Object node = newNode(pkg, product, settings);
        if (product.equals("elasticsearch")) {
            RootHandler.installIfMissing(node);
        }
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.getClass().getMethod("close").invoke(node);
            } catch (ReflectiveOperationException e) {
                System.err.println("escf-engine: close: " + cause(e));
            } finally {
                closed.countDown();
            }
        }, "escf-engine-close"));
        try {
            node.getClass().getMethod("start").invoke(node);
        } catch (InvocationTargetException e) {
            System.err.println("escf-engine: start failed: " + e.getCause());
            e.getCause().printStackTrace();
            Runtime.getRuntime().halt(3);
        }
        System.out.println("escf-engine: started");
        System.out.flush();
        closed.await();
    }

    private static Object newNode(String pkg, String product, Map<String, String> settings) throws Exception {
        Class<?> settingsClass = Class.forName(pkg + ".common.settings.Settings");
        Object builder = settingsClass.getMethod("builder").invoke(null);
        Method put = builder.getClass().getMethod("put", String.class, String.class);
        for (Map.Entry<String, String> e : settings.entrySet()) {
            put.invoke(builder, e.getKey(), e.getValue());
        }
        Object built = builder.getClass().getMethod("build").invoke(builder);

        Collection<Class<?>> plugins = new ArrayList<>();
        for (String name : HTTP_PLUGINS.get(product)) {
            try {
                plugins.add(Class.forName(name));
                break;
            } catch (ClassNotFoundException ignored) {
                // an older or newer engine: try the next name
            }
        }
        if (plugins.isEmpty()) {
            throw new IllegalStateException("no HTTP transport plugin on the classpath: tried " + HTTP_PLUGINS.get(product));
        }
        String extra = System.getProperty("escf.plugins", "");
        for (String name : extra.split(",")) {
            if (!name.isBlank()) {
                plugins.add(Class.forName(name.trim()));
            }
        }
        Class<?> mockNode = Class.forName(pkg + ".node.MockNode");
        try {
            return construct(pkg, mockNode, settingsClass, built, plugins);
        } catch (InvocationTargetException e) {
            System.err.println("escf-engine: node construction failed: " + e.getCause());
            e.getCause().printStackTrace();
            Runtime.getRuntime().halt(3);
            return null;
        }
    }

    /**
     * Elasticsearch's public MockNode constructors first ask ESTestCase for a
     * transport port range, which needs a running JUnit test (a
     * RandomizedContext); its private constructor from an Environment does
     * not, so that one is used where it takes plugin classes (Elasticsearch
     * 7.17, 8.x, 9.x). OpenSearch's public constructor needs no test.
     */
    private static Object construct(String pkg, Class<?> mockNode, Class<?> settingsClass, Object settings,
            Collection<Class<?>> plugins) throws ReflectiveOperationException {
        Class<?> envClass = Class.forName(pkg + ".env.Environment");
        for (Constructor<?> c : mockNode.getDeclaredConstructors()) {
            Class<?>[] p = c.getParameterTypes();
            boolean fromEnv = p.length >= 3 && p[0] == envClass && p[1] == Collection.class && p[2] == boolean.class
                    && c.getGenericParameterTypes()[1].getTypeName().contains("java.lang.Class");
            if (!fromEnv || !pkg.equals("org.elasticsearch")) {
                continue;
            }
            Method prepare = Class.forName(pkg + ".node.InternalSettingsPreparer")
                    .getMethod("prepareEnvironment", settingsClass, Map.class, Path.class, java.util.function.Supplier.class);
            Object env = prepare.invoke(null, settings, Map.of(), null, (java.util.function.Supplier<String>) () -> "escf-node");
            Object[] args = new Object[p.length];
            args[0] = env;
            args[1] = plugins;
            args[2] = true; // forbidPrivateIndexSettings, as the public constructors pass
            if (p.length == 4 && p[3] == java.io.Closeable.class) {
                args[3] = (java.io.Closeable) () -> {};
            } else if (p.length != 3) {
                continue;
            }
            c.setAccessible(true);
            return c.newInstance(args);
        }
        return mockNode.getConstructor(settingsClass, Collection.class).newInstance(settings, plugins);
    }

    /**
     * Elasticsearch 8+ routes its logging through its own LogManager, which
     * must be configured before any node class logs; OpenSearch and
     * Elasticsearch 7 read log4j2.properties from the classpath.
     */
    private static void configureLogging(String pkg) {
        try {
            Class<?> lc = Class.forName(pkg + ".common.logging.LogConfigurator");
            for (String m : List.of("loadLog4jPlugins", "configureESLogging")) {
                try {
                    lc.getMethod(m).invoke(null);
                } catch (NoSuchMethodException ignored) {
                    // not in this engine's version
                }
            }
        } catch (ReflectiveOperationException e) {
            System.err.println("escf-engine: logging: " + cause(e));
        }
    }

    /**
     * Exits (closing the node) when stdin reaches its end: the process that
     * started this JVM holds the other end of the pipe, so a test binary
     * that dies, even by SIGKILL, leaves no node running.
     */
    private static void watchParent() {
        Thread t = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // nothing is ever sent; only the end matters
                }
            } catch (java.io.IOException e) {
                // the same as the end
            }
            System.err.println("escf-engine: stdin closed (the parent is gone): stopping");
            System.exit(0);
        }, "escf-parent-watch");
        t.setDaemon(true);
        t.start();
    }

    private static String cause(Throwable e) {
        return e instanceof InvocationTargetException ite && ite.getCause() != null ? ite.getCause().toString() : e.toString();
    }

    private static void usage(String msg) {
        System.err.println("escf-engine: " + msg);
        System.err.println("usage: Launcher --product opensearch|elasticsearch --home DIR [--setting key=value]...");
        System.exit(2);
    }
}
