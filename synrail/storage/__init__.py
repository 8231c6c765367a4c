"""Where bytes live: the URL store, the build lock, output folder claims, the code version, image
codecs and Parquet tables. Knows nothing about stages."""
