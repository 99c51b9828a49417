package esemu

// Parameter lists shared by several endpoints.
const (
	pIndicesOpts = "expand_wildcards ignore_unavailable allow_no_indices ignore_throttled"
	pMaster      = "master_timeout timeout cluster_manager_timeout"
	pWrite       = "routing refresh timeout wait_for_active_shards if_seq_no if_primary_term version version_type require_alias"
	pSearch      = "from size _source _source_includes _source_excludes seq_no_primary_term version track_total_hits " +
		"preference routing scroll search_type rest_total_hits_as_int timeout request_cache allow_partial_search_results " +
		"max_concurrent_shard_requests pre_filter_shard_size batched_reduce_size ccs_minimize_roundtrips typed_keys track_scores " +
		"sort " + pSearchUnmodeled + " " + pIndicesOpts
	// pSearchUnmodeled are search URL parameters ES knows that the emulator
	// refuses as not modeled (rather than as unrecognized).
	pSearchUnmodeled = "q df analyzer analyze_wildcard default_operator lenient explain stored_fields docvalue_fields " +
		"terminate_after stats suggest_field suggest_mode suggest_size suggest_text include_named_queries_score"
)

// routes is the REST API, most specific patterns first.
func (c *Cluster) routes() []route {
	var rs []route
	add := func(method, pattern, kind, params string, h handlerFunc) {
		c.addRoute(&rs, method, pattern, kind, params, h)
	}
	// The emulator's own controls.
	add("GET", "/_esemu/state", KindAny, "", ctlState)
	add("GET", "/_esemu/nodes", KindAny, "", ctlNodes)
	add("POST", "/_esemu/nodes/{n}/kill", KindAny, "", ctlKill)
	add("POST", "/_esemu/nodes/{n}/restart", KindAny, "", ctlRestart)
	add("GET", "/_esemu/faults", KindAny, "", ctlFaults)
	add("POST", "/_esemu/faults", KindAny, "", ctlAddFault)
	add("DELETE", "/_esemu/faults", KindAny, "", ctlClearFaults)
	add("POST", "/_esemu/gcp_sync", KindAny, "", ctlGCPSync)
	add("GET", "/_esemu/shards/{index}/{shard}", KindAny, "", ctlShard)
	add("GET", "/_esemu/shards/{index}/{shard}/history", KindAny, "copy", ctlHistory)
	add("POST", "/_esemu/shards/{index}/{shard}/fail_searches", KindAny, "copy count", ctlFailSearches)
	add("POST", "/_esemu/shards/{index}/{shard}/hold", KindAny, "", ctlHold)
	add("POST", "/_esemu/shards/{index}/{shard}/release", KindAny, "", ctlRelease)

	add("GET", "/", KindRoot, "", apiRoot)
	add("GET", "/_cluster/health", KindHealth, "wait_for_status level local wait_for_nodes wait_for_no_relocating_shards wait_for_no_initializing_shards wait_for_active_shards wait_for_events return_200_for_cluster_health_timeout "+pMaster+" "+pIndicesOpts, apiHealth)
	add("GET", "/_cluster/health/{index}", KindHealth, "wait_for_status level local wait_for_nodes wait_for_no_relocating_shards wait_for_no_initializing_shards wait_for_active_shards wait_for_events return_200_for_cluster_health_timeout "+pMaster+" "+pIndicesOpts, apiHealth)

	// Search APIs before anything that binds {index}.
	for _, m := range []string{"GET", "POST"} {
		add(m, "/_search/scroll", KindScroll, "scroll scroll_id rest_total_hits_as_int", apiScroll)
		add(m, "/_search/scroll/{scroll_id}", KindScroll, "scroll scroll_id rest_total_hits_as_int", apiScroll)
		add(m, "/_search", KindSearch, pSearch, apiSearch)
		add(m, "/{index}/_search", KindSearch, pSearch, apiSearch)
		add(m, "/_count", KindCount, "preference routing terminate_after "+pIndicesOpts, apiCount)
		add(m, "/{index}/_count", KindCount, "preference routing terminate_after "+pIndicesOpts, apiCount)
		add(m, "/_refresh", KindRefresh, pIndicesOpts, apiRefresh)
		add(m, "/{index}/_refresh", KindRefresh, pIndicesOpts, apiRefresh)
	}
	add("DELETE", "/_search/scroll", KindScroll, "", apiClearScroll)
	add("DELETE", "/_search/scroll/{scroll_id}", KindScroll, "", apiClearScroll)
	if c.info.openSearch {
		add("POST", "/{index}/_search/point_in_time", KindPIT, "keep_alive preference routing allow_partial_pit_creation "+pIndicesOpts, apiOpenPIT)
		add("DELETE", "/_search/point_in_time", KindPIT, "", apiClosePIT)
		add("DELETE", "/_search/point_in_time/_all", KindPIT, "", apiClosePIT)
		add("GET", "/_search/point_in_time/_all", KindPIT, "", apiListPITs)
	} else {
		add("POST", "/{index}/_pit", KindPIT, "keep_alive preference routing allow_partial_search_results "+pIndicesOpts, apiOpenPIT)
		add("DELETE", "/_pit", KindPIT, "", apiClosePIT)
	}

	add("GET", "/_stats", KindStats, "level forbid_closed_indices groups completion_fields fielddata_fields fields include_segment_file_sizes include_unloaded_segments "+pIndicesOpts, apiStats)
	add("GET", "/_stats/{metric}", KindStats, "level forbid_closed_indices groups completion_fields fielddata_fields fields include_segment_file_sizes include_unloaded_segments "+pIndicesOpts, apiStats)
	add("GET", "/{index}/_stats", KindStats, "level forbid_closed_indices groups completion_fields fielddata_fields fields include_segment_file_sizes include_unloaded_segments "+pIndicesOpts, apiStats)
	add("GET", "/{index}/_stats/{metric}", KindStats, "level forbid_closed_indices groups completion_fields fielddata_fields fields include_segment_file_sizes include_unloaded_segments "+pIndicesOpts, apiStats)

	add("GET", "/_cluster/state/{metric}", KindClusterState, "flat_settings local wait_for_metadata_version wait_for_timeout "+pIndicesOpts+" "+pMaster, apiClusterState)
	add("GET", "/_cluster/state/{metric}/{index}", KindClusterState, "flat_settings local wait_for_metadata_version wait_for_timeout "+pIndicesOpts+" "+pMaster, apiClusterState)

	add("GET", "/_resolve/index/{name}", KindResolve, pIndicesOpts+" mode", apiResolve)

	add("POST", "/_aliases", KindAlias, pMaster, apiAliasActions)
	add("GET", "/_alias", KindAlias, "local "+pIndicesOpts+" "+pMaster, apiGetAlias)
	add("GET", "/_alias/{name}", KindAlias, "local "+pIndicesOpts+" "+pMaster, apiGetAlias)
	add("HEAD", "/_alias/{name}", KindAlias, "local "+pIndicesOpts+" "+pMaster, apiHeadAlias)
	add("GET", "/{index}/_alias", KindAlias, "local "+pIndicesOpts+" "+pMaster, apiGetAlias)
	add("GET", "/{index}/_alias/{name}", KindAlias, "local "+pIndicesOpts+" "+pMaster, apiGetAlias)
	for _, m := range []string{"PUT", "POST"} {
		add(m, "/{index}/_alias/{name}", KindAlias, pMaster, apiPutAlias)
		add(m, "/{index}/_aliases/{name}", KindAlias, pMaster, apiPutAlias)
	}
	add("DELETE", "/{index}/_alias/{name}", KindAlias, pMaster, apiDeleteAlias)
	add("DELETE", "/{index}/_aliases/{name}", KindAlias, pMaster, apiDeleteAlias)

	add("PUT", "/_index_template/{name}", KindTemplate, "create cause "+pMaster, apiPutTemplate)
	add("POST", "/_index_template/{name}", KindTemplate, "create cause "+pMaster, apiPutTemplate)
	add("GET", "/_index_template", KindTemplate, "local flat_settings include_defaults "+pMaster, apiGetTemplate)
	add("GET", "/_index_template/{name}", KindTemplate, "local flat_settings include_defaults "+pMaster, apiGetTemplate)
	add("HEAD", "/_index_template/{name}", KindTemplate, "local flat_settings "+pMaster, apiHeadTemplate)
	add("DELETE", "/_index_template/{name}", KindTemplate, pMaster, apiDeleteTemplate)

	add("PUT", "/_data_stream/{name}", KindDataStream, pMaster, apiCreateDataStream)
	add("GET", "/_data_stream", KindDataStream, "expand_wildcards include_defaults verbose "+pMaster, apiGetDataStream)
	add("GET", "/_data_stream/{name}", KindDataStream, "expand_wildcards include_defaults verbose "+pMaster, apiGetDataStream)
	add("DELETE", "/_data_stream/{name}", KindDataStream, "expand_wildcards "+pMaster, apiDeleteDataStream)

	add("POST", "/{index}/_rollover", KindRollover, "dry_run lazy wait_for_active_shards "+pMaster, apiRollover)
	add("POST", "/{index}/_rollover/{new_index}", KindRollover, "dry_run lazy wait_for_active_shards "+pMaster, apiRollover)

	for _, m := range []string{"POST", "PUT"} {
		add(m, "/_bulk", KindBulk, "refresh routing timeout wait_for_active_shards require_alias", apiBulk)
		add(m, "/{index}/_bulk", KindBulk, "refresh routing timeout wait_for_active_shards require_alias", apiBulk)
		add(m, "/{index}/_doc/{id}", KindDoc, pWrite+" op_type", apiIndexDoc)
		add(m, "/{index}/_create/{id}", KindDoc, pWrite, apiCreateDoc)
	}
	add("POST", "/{index}/_doc", KindDoc, pWrite+" op_type", apiIndexDoc)
	add("POST", "/{index}/_update/{id}", KindDoc, "routing refresh timeout wait_for_active_shards if_seq_no if_primary_term retry_on_conflict _source _source_includes _source_excludes require_alias", apiUpdate)
	add("GET", "/{index}/_doc/{id}", KindDoc, "routing preference realtime refresh _source _source_includes _source_excludes version version_type", apiGetDoc)
	add("HEAD", "/{index}/_doc/{id}", KindDoc, "routing preference realtime refresh _source _source_includes _source_excludes version version_type", apiHeadDoc)
	add("GET", "/{index}/_source/{id}", KindDoc, "routing preference realtime refresh _source _source_includes _source_excludes version version_type", apiGetSource)
	add("DELETE", "/{index}/_doc/{id}", KindDoc, "routing refresh timeout wait_for_active_shards if_seq_no if_primary_term version version_type", apiDeleteDoc)

	add("GET", "/_settings", KindIndices, "flat_settings include_defaults local "+pIndicesOpts+" "+pMaster, apiGetSettings)
	add("GET", "/{index}/_settings", KindIndices, "flat_settings include_defaults local "+pIndicesOpts+" "+pMaster, apiGetSettings)
	add("GET", "/{index}/_settings/{name}", KindIndices, "flat_settings include_defaults local "+pIndicesOpts+" "+pMaster, apiGetSettings)
	add("PUT", "/{index}/_settings", KindIndices, "preserve_existing flat_settings reopen "+pIndicesOpts+" "+pMaster, apiPutSettings)
	add("GET", "/{index}/_mapping", KindIndices, "local "+pIndicesOpts+" "+pMaster, apiGetMapping)
	add("POST", "/{index}/_open", KindIndices, "wait_for_active_shards "+pIndicesOpts+" "+pMaster, apiOpen)
	add("POST", "/{index}/_close", KindIndices, "wait_for_active_shards "+pIndicesOpts+" "+pMaster, apiClose)
	add("PUT", "/{index}", KindIndices, "wait_for_active_shards include_type_name "+pMaster, apiCreateIndex)
	add("GET", "/{index}", KindIndices, "flat_settings include_defaults local features "+pIndicesOpts+" "+pMaster, apiGetIndex)
	add("HEAD", "/{index}", KindIndices, "flat_settings include_defaults local "+pIndicesOpts+" "+pMaster, apiHeadIndex)
	add("DELETE", "/{index}", KindIndices, pIndicesOpts+" "+pMaster, apiDeleteIndex)
	return rs
}
