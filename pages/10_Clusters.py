"""Clusters: the ledgers of several clusters side by side (each ATTACHed read-only), and, when the
clusters share an authority, each team's quota and month budget as the gates decide against it."""
import streamlit as st

import ui
from lib.dashboard import cluster_queries

f = ui.frame()

data = ui.PageData(cluster_queries.cluster_board, f)
st.title("Clusters")
chosen = st.multiselect("Clusters", data["clusters"], default=data["clusters"], key="cl_clusters")
shown = cluster_queries.only_clusters(data.data, chosen)
ui.caption(f"{len(data['clusters'])} cluster ledger(s): {', '.join(data['clusters'])} · {f.describe()}")

st.subheader("Shared budget (the authority)")
if data["authority_error"]:
    st.warning(f"The authority cannot be read: {ui.as_text(data['authority_error'])}")
elif data["authority"] is None:
    st.info("These clusters name no shared authority (GATE_AUTHORITY): each ledger's own numbers are below.")
else:
    ui.table(data["authority"], "authority_budget", "dl_cl_authority", empty="The authority holds no team.",
             caption="What every cluster's gate decides against now: accelerators held by each cluster, this "
                     "month's spend and the reservations committed, across all clusters.")

st.subheader("Per cluster and team")
ui.table(shown["board"], "cluster_board", "dl_cl_board", empty="No decisions, holds or spend in these clusters.",
         caption="Admitted and deferred in the period; accelerators and GPU-hours held now; GPU-hours spent "
                 "this month (runs that ended in it).")

st.subheader("Latest decisions")
ui.table(shown["decisions"], "cluster_decisions", "dl_cl_decisions", empty="No decisions in the period.")
