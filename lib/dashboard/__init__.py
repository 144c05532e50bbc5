"""The dashboard's read models: queries, figures, filters, tables and the what-if form's mapping.

No Streamlit here: the pages call these and render what they return.
"""
