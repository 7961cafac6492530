set -e
cd /app
mkdir -p stage/$(dirname data/umber.csv) && printf '%s' 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' > stage/data/umber.csv && echo >> stage/data/umber.csv
mkdir -p stage/$(dirname data/fjord.txt) && printf '%s' 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' > stage/data/fjord.txt && echo >> stage/data/fjord.txt
mkdir -p stage/$(dirname data/bravo.csv) && printf '%s' 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' > stage/data/bravo.csv && echo >> stage/data/bravo.csv
mkdir -p stage/$(dirname data/sub/garnet.txt) && printf '%s' 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' > stage/data/sub/garnet.txt && echo >> stage/data/sub/garnet.txt
mkdir -p stage/$(dirname data/xenon.csv) && printf '%s' 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' > stage/data/xenon.csv && echo >> stage/data/xenon.csv
mkdir -p incoming && tar -C stage -czf incoming/bundle.tar.gz data
rm -rf stage
