package escf.engines;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/**
 * The three analysis components the {@code .security} index's mapping
 * uses (its {@code email} analyzer) that live in Elasticsearch's
 * analysis-common module, which is not on Maven Central: without them
 * creating the index fails ("Unknown filter type [pattern_capture]",
 * "failed to find tokenizer under name [uax_url_email]") and with it API
 * keys. Built on Lucene's classes (unique: a small filter of its own);
 * compiled only into secured Elasticsearch launchers and loaded with the
 * x-pack plugins. Tests only.
 */
public final class SecurityAnalysisPlugin extends Plugin implements AnalysisPlugin {
    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        return Map.of("uax_url_email", (indexSettings, env, name, settings) ->
                TokenizerFactory.newFactory(name, UAX29URLEmailTokenizer::new));
    }

    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        return Map.of(
                "pattern_capture", (indexSettings, env, name, settings) -> {
                    boolean preserve = settings.getAsBoolean("preserve_original", true);
                    List<Pattern> patterns = new ArrayList<>();
                    for (String p : settings.getAsList("patterns")) {
                        patterns.add(Pattern.compile(p));
                    }
                    Pattern[] ps = patterns.toArray(new Pattern[0]);
                    return filter(name, in -> new PatternCaptureGroupTokenFilter(in, preserve, ps));
                },
                "unique", (indexSettings, env, name, settings) -> filter(name, Unique::new));
    }

    private static TokenFilterFactory filter(String name, java.util.function.Function<TokenStream, TokenStream> f) {
        return new TokenFilterFactory() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public TokenStream create(TokenStream in) {
                return f.apply(in);
            }
        };
    }

    /** Drops a token whose term the stream already had (unique, only_on_same_position: false). */
    static final class Unique extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);
        private final CharArraySet seen = new CharArraySet(8, false);

        Unique(TokenStream in) {
            super(in);
        }

        @Override
        public boolean incrementToken() throws java.io.IOException {
            while (input.incrementToken()) {
                char[] t = new char[term.length()];
                System.arraycopy(term.buffer(), 0, t, 0, t.length);
                if (!seen.contains(t, 0, t.length)) {
                    seen.add(t);
                    return true;
                }
            }
            return false;
        }

        @Override
        public void reset() throws java.io.IOException {
            super.reset();
            seen.clear();
        }
    }
}
